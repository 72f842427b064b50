"""Report layer: the analysis in words, tables and figures; the blog export; the rendered report.

Everything here presents what benchlib.analysis computed (numbers and category labels) and computes
nothing the analysis tables or metrics.json hold; numbers become text in ``format`` only.
"""
