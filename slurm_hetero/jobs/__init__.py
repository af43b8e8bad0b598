"""The one job table (table.py) and what reads jobs into it: sacct rows (sacct.py), SWF
logs of the Parallel Workloads Archive (swf.py), the Alibaba GPU trace (alibaba.py);
`traces.read_trace` picks the reader by a file's name and header. Runtime prediction and
the reports both read this table; neither has a reader of its own."""
