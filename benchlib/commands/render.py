"""`benchlib render`: a cluster environment validated, and what its target would apply, printed."""

from __future__ import annotations

from pathlib import Path

import yaml

from .. import collectors
from ..base.errors import ConfigError
from ..settings.loading import load_environment
from ..targets import registry
from .common import ERRORS, add, params


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "render",
        help="validate a cluster environment and print what it would apply",
        description="Validate pipelines/<env>/environment.yaml and print, in order, every "
        "manifest, helm command, values file, readiness check and command the "
        "target would apply or run. Contacts nothing.",
        examples=["benchlib render --env local-k8s", "benchlib render --env eks-m6i | less"],
        exit_codes=f"0 printed; {ERRORS}: an invalid environment, a file it names missing or not YAML, "
        "a target that applies nothing (the lab).",
    )
    s.add_argument("--env", required=True, help="environment name (a folder under pipelines/)")
    s.set_defaults(func=run)


class _PlainDumper(yaml.SafeDumper):
    """Writes shared sub-objects out in full: a manifest shows no YAML anchors."""

    def ignore_aliases(self, data) -> bool:
        return True


def run(args) -> int:
    env = load_environment(args.env)
    tools = sorted({t.tool for t in params(args).tests.values()}) if args.params else ["netperf"]
    servers = collectors.servers(tools)
    render = registry.get(env.target).render
    if render is None:
        raise ConfigError(f"environment {env.name}: target {env.target} applies no manifests")
    items = render(env, list(env.scenarios), servers)
    for title, item in items:  # written as they are: the project's own manifests, for kubectl or a diff
        print(f"# --- {title}")
        if isinstance(item, Path):
            if not item.is_file():
                raise ConfigError(f"environment {env.name}: {title}: {item} not found")
            text = item.read_text()
            try:
                yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise ConfigError(f"{item}: not valid YAML: {exc}") from None
            print(text.rstrip())
        elif isinstance(item, str):
            print(item)
        else:
            print(yaml.dump(item, Dumper=_PlainDumper, sort_keys=False).rstrip())
    return 0
