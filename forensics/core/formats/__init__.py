"""The wire formats our probes write and the offline tool reads, each stated once: its name,
version, keys in the order they are written, and the functions that write and read a line.

Pure standard library (orjson when installed): the probes import these modules inside the user's
process, the readers import them offline. Nothing here imports torch, pandas or numpy.
"""
