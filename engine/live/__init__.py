"""The live service: ``controller`` (the loop that wires the parts) with ``ingest`` (files and
spool into the engine), ``batch`` (one transaction with its read offsets), ``schedpoll`` (the
scheduler's word), ``outage`` (the store refusing writes), ``reload`` (the rulebook), ``metrics``
and ``launch`` (starting it as a child process); ``actuator``; the node ``agent``."""
