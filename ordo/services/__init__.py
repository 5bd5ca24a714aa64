"""The processes and operations ``ordo`` runs beside the arbiter and the consumer: the embedded stack and its
supervision (``stack``, ``up``), the table service (``compactor``), ``vacuum``, the audit replay (``audit``) and
reading a table's files without Spark (``files``)."""
