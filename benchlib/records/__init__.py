"""A run's raw record on disk: its layout, reads, checksums and migrations (record), the type and
range of every field of its meta.json and cpu.json (record_schema), and the records against DVC
(store).
"""
