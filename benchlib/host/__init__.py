"""The machine a measurement runs on: one measurement at a time (machine), its CPUs sampled per
side (cpu), and what other processes took of them over a run (disturbance).
"""
