"""Records into the tidy tables: parse and check them (tidy), and which records the last parse
read, so that the next one reads only what changed (parse_index).
"""
