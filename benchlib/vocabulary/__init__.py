"""The names every stage shares: each metric with its unit, direction and table columns (schema),
and the shapes of a service mesh (meshes).
"""
