#!/usr/bin/env bash
# The main job: install what the campaign needs, then run the pipeline (`dvc repro`) on
# the default params.yaml (the embedded two-node lab). Extra arguments go to
# `dvc repro`, e.g. `scripts/reproduce.sh parse` to run up to one stage.
# `--preset FILE` first makes FILE the params.yaml (dvc reads only
# params.yaml; one with edits of its own is never overwritten), e.g. `scripts/reproduce.sh --preset pipelines/local-lab/params-datapaths.yaml`;
# `--preset pipelines/local-k8s/params.yaml` (or local-cilium) runs on a real local cluster,
# `--preset pipelines/local-clusters/params.yaml` (or local-clusters-calico) on several side by side
# (brought up and down here).
# Ctrl-C stops the measurement and tears down what it started; the same command again resumes
# where it stopped, measuring nothing twice. The report ends up in reports/report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then  # the comment block above, without its #
  awk 'NR == 1 {next} !/^#/ {exit} {sub(/^# ?/, ""); print}' "$0"
  exit 0
fi
if [[ "${1:-}" == "--preset" ]]; then
  preset=${2:?--preset needs a params file, e.g. pipelines/local-lab/params-datapaths.yaml}
  [[ -f "$preset" ]] || { echo "reproduce.sh: --preset $preset: no such file" >&2; exit 2; }
  # params.yaml is overwritten only when it holds nothing of its own: the committed
  # default or a copy of a shipped preset
  own_edits=yes
  if git diff --quiet HEAD -- params.yaml 2>/dev/null; then own_edits=; fi
  for shipped in "$preset" pipelines/*/params*.yaml; do
    if cmp -s "$shipped" params.yaml; then own_edits=; fi
  done
  if [[ -n "$own_edits" ]]; then
    echo "reproduce.sh: params.yaml has edits of its own (it is neither the committed file nor a copy of a" \
         "preset) that --preset $preset would overwrite: save it under another name and pass that to --preset," \
         "or drop the edits with git checkout params.yaml" >&2
    exit 2
  fi
  cp "$preset" params.yaml
  echo "reproduce.sh: params.yaml is now a copy of $preset (git checkout params.yaml restores the default)"
  shift 2
fi
# what this campaign needs (the default lab campaign: the lab profile; a local-cluster preset adds
# the cluster's; scripts/setup.sh with no argument installs everything)
bash scripts/setup.sh --params params.yaml
# setup.sh synced .venv from uv.lock: use it directly, so that dvc is this script's own child
export PATH="$PWD/.venv/bin:$PWD/.tools/bin:$PATH"
benchlib validate
# Stopping this script stops the measurement (docs/how-to/interrupt-resume.md).
# SIGTERM, SIGHUP and SIGINT are passed on to dvc; if the script dies without a
# word (SIGKILL), the kernel sends dvc SIGTERM (setpriv --pdeathsig). A dying
# dvc takes its `benchlib collect` along the same way, which tears down.
dvc_pid=
stop_dvc() { [[ -z "$dvc_pid" ]] || kill -TERM "$dvc_pid" 2>/dev/null || true; }
trap 'stop_dvc; exit 130' INT
trap 'stop_dvc; exit 143' TERM
trap 'stop_dvc; exit 129' HUP
# A campaign whose scenarios run the local cluster (its set-up profiles name
# "cluster": pipelines/local-k8s, local-cilium, local-clusters, ...) brings it
# up first and takes it down at the end, also after a failure, Ctrl-C or SIGTERM.
envs=$(python -c 'import yaml; print(*yaml.safe_load(open("params.yaml"))["experiment"]["environments"])')
read -ra profiles <<<"$(benchlib doctor --profiles)"
if [[ " ${profiles[*]} " == *" cluster "* ]]; then
  bash scripts/k8s-local-cluster.sh build
  # the build of each CNI built from source that the scenarios switch to (their settings.cni, as the
  # profiles name them); Calico's from a checkout (BENCHLIB_CALICO_SRC) or a clone of its release
  while IFS=$'\t' read -r cni built _; do
    if [[ $built == build && " ${profiles[*]} " == *" $cni "* ]]; then bash scripts/k8s-local-cluster.sh build "$cni"; fi
  done < <(bash scripts/k8s-local-cluster.sh cnis)
  # On a signal dvc exits at once while its `benchlib collect` still deletes
  # its namespace; and another measurement on the machine may run: down
  # --wait lets each end (bounded) before the cluster goes away.
  # the clusters the environments name beside their own (kubernetes.clusters), each up with the
  # bridge CNI: its scenarios' first activation switches it to their pod network
  # shellcheck disable=SC2086 # the environments, a word each
  clusters=$(python -c 'import sys, yaml
for env in sys.argv[1:]:
    print(*yaml.safe_load(open(f"pipelines/{env}/environment.yaml")).get("kubernetes", {}).get("clusters", {}))' $envs)
  cluster_down() {
    local name
    for name in $clusters; do bash scripts/k8s-local-cluster.sh --cluster "$name" down --wait; done
    bash scripts/k8s-local-cluster.sh down --wait
  }
  trap cluster_down EXIT
  bash scripts/k8s-local-cluster.sh up
  for name in $clusters; do bash scripts/k8s-local-cluster.sh --cluster "$name" up; done
fi
# In the background, so that a trap runs at once (bash defers traps while a
# foreground command runs); collect restores the SIGINT a background job ignores.
# --quiet: DVC's own lines (stage names, lock file updates, git and push hints)
# make way for the stages' output; its errors still show. What the stages'
# libraries and kernels say is in data/raw/<campaign>.log.
setpriv --pdeathsig TERM -- dvc repro --quiet "$@" &
dvc_pid=$!
wait "$dvc_pid"
# The whole pipeline ran (or was up to date): say what it found and where the report is.
[[ $# -gt 0 ]] || benchlib summary
