"""What every layer stands on: the errors the command line turns into one line and exit code 2
(errors), data made safe to show in a page (escape), caps on what a read takes in (limits), files
written whole or not at all (files), and where messages go (logs).
"""
