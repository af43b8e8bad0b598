"""Container images for heterogeneous nodes: catalog, variant resolution, the OCI wrapper.

Modules that run on compute nodes (gres, resolve, ociconfig, wrapper, taskprolog, nodeconf)
import only the standard library: the wrapper starts with `python -I -S` for every
container task, so its start-up time is the overhead users see.
"""
