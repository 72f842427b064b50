"""The measurement: what each environment runs in blocks (plan), the runner that measures it and
writes each run's record (runner), and what a campaign needs, checked before collect (doctor).
"""
