"""`benchlib doctor`: what the campaign needs here, checked before it starts."""

from __future__ import annotations

from ..measure import doctor
from .common import EXIT_ERROR, add, out, params


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "doctor",
        help="check what the campaign needs here before it starts",
        description="Check, one line each, what the campaign of params.yaml needs before "
        "`benchlib collect`: for each environment, the tools its tests run and their "
        "versions, the mesh proxies (HAProxy, Envoy) its scenarios use, perf and the "
        "kernel settings it needs when experiment.profile_runs > 0; for the lab, root "
        "and the kernel features of each scenario (tried in a throwaway network "
        "namespace, as collect does); for a Kubernetes environment, the kubeconfig, the "
        f"API server ({doctor.API_TIMEOUT_S:g} s per request), the RBAC the target needs "
        "(SelfSubjectAccessReview), the nodes its placements need and the image on "
        "them; for ssh, a login to each host and the tools there. Each line reads ok or "
        "FAIL with the fix. Every check runs, whatever failed before it. Creates nothing but "
        "throwaway namespaces.",
        examples=["sudo .venv/bin/benchlib doctor", "benchlib doctor --profiles   # e.g. 'lab mesh'"],
        exit_codes="0 every check passed; 2 a check failed (each FAIL line says how to fix it), "
        "or params.yaml is invalid.",
    )
    s.add_argument(
        "--profiles",
        action="store_true",
        help="only print the scripts/setup.sh profiles the campaign needs (lab, mesh, cluster, and each "
        "local-cluster CNI with packages or a build of its own, e.g. cilium), checking nothing",
    )
    s.set_defaults(func=run)


def run(args) -> int:
    p = params(args)
    if args.profiles:
        out(" ".join(doctor.setup_profiles(p)))
        return 0
    failed = total = 0
    for check in doctor.run(p):
        out(check.line(), flush=True)
        total, failed = total + 1, failed + (not check.ok)
    out(
        f"doctor: {total - failed} of {total} checks ok for {p.source}"
        + (f"; fix the {failed} FAIL line(s) above before `benchlib collect`" if failed else "")
    )
    return EXIT_ERROR if failed else 0
