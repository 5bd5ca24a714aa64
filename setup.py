"""Everything is in pyproject.toml but one file: ``ordo-legacy.pth``, which the wheel puts beside the ``ordo``
package in site-packages so that ordo 0.4's import paths keep working for one release (ordo/_legacy.py)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "ordo-legacy.pth"
# A .pth line that starts with `import` is run at interpreter start-up: it only appends an import finder.
LINE = "import ordo._legacy; ordo._legacy.install()\n"


class BuildWithPth(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / PTH
        target.write_text(LINE)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


setup(cmdclass={"build_py": BuildWithPth})
