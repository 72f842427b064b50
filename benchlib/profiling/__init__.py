"""CPU profiles of a run: perf recording the run's CPU window (perf_record), its samples folded
into stacks and categories (stacks), and the kernel's count of each BPF program's runs (bpfstats).
"""
