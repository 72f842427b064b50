"""`benchlib lab`: inspect or clean the embedded network-namespace lab."""

from __future__ import annotations

from .. import collectors
from ..host import machine
from ..settings.loading import load_environment
from ..targets import lab
from .common import ERRORS, HelpFormatter, add, epilog, out, params


def add_parser(subparsers) -> None:
    lab_p = subparsers.add_parser(
        "lab",
        help="the embedded network-namespace lab",
        description="Inspect or clean the embedded lab.",
        formatter_class=HelpFormatter,
        epilog=epilog(
            ["benchlib lab probe", "sudo .venv/bin/benchlib lab clean"],
            "those of LAB_COMMAND (benchlib lab LAB_COMMAND --help).",
        ),
    )
    lab_sub = lab_p.add_subparsers(dest="lab_command", required=True, metavar="LAB_COMMAND")
    s = add(
        lab_sub,
        "clean",
        help="remove namespaces left by a killed campaign",
        description="Remove lab namespaces (and processes in them) whose campaign is "
        "no longer running. Namespaces of a live campaign are kept.",
        examples=["sudo .venv/bin/benchlib lab clean"],
        exit_codes=f"0 cleaned (or nothing left over); {ERRORS}, also when a measurement holds the machine.",
    )
    s.set_defaults(func=clean)
    s = add(
        lab_sub,
        "probe",
        help="check privileges, tools and kernel features",
        description="Check that the lab can run here: root, the tools (ip, netperf, "
        "netserver, nft, ...) and the kernel features its scenarios need (network "
        "namespaces, veth, bridge, vxlan, the eBPF host-routing programs, "
        "WireGuard, IPsec ESP). Lists the scenarios this machine can run and, "
        "for each one it cannot, what is missing; exits 1 if any is missing. "
        "Creates nothing but throwaway namespaces to test them.",
        examples=["sudo .venv/bin/benchlib lab probe", "sudo .venv/bin/benchlib lab probe --env local-lab"],
        exit_codes=f"0 every scenario can run; 1 some cannot (the output says what is missing); {ERRORS}, "
        "also when what every scenario needs is missing (root, the tools).",
    )
    s.add_argument("--env", default="local-lab", help="environment to probe (default: %(default)s)")
    s.set_defaults(func=probe)


def clean(args) -> int:
    # a collect starting its lab would race us; a running one owns what it built
    with machine.exclusive("benchlib lab clean"):
        removed = lab.clean_leftovers()
    out(
        f"lab: {len(removed)} leftover namespace(s) and temporary director(ies) removed"
        if removed
        else "lab: nothing left over"
    )
    return 0


def probe(args) -> int:
    env = load_environment(args.env)
    p = params(args)
    tools = sorted({t.tool for t in p.tests.values()})
    lab.check_machine(
        env, collectors.client_commands(tools) + [s.argv[0] for s in collectors.servers(tools)]
    )  # what every scenario needs: stops here if missing
    problems = lab.scenario_problems(env, list(env.scenarios))
    ready = [s for s in env.scenarios if s not in problems]
    out(
        f"lab: can run {len(ready)} of {len(env.scenarios)} scenarios {ready}; CPUs client/server: "
        f"{env.cpus.client if env.cpus else lab.default_cpus()[0]} / "
        f"{env.cpus.server if env.cpus else lab.default_cpus()[1]}"
    )
    for name, reasons in problems.items():
        for reason in reasons:
            out(f"lab: cannot run scenario {name}: needs {reason}")
    return 1 if problems else 0
