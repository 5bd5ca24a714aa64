from ordo.cli import main

main()
