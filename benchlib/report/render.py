"""Execute the analysis notebooks and render them into one offline HTML report.

The notebooks' jupytext .py files are the source of truth; papermill gets
them as notebook objects, so no .ipynb has to exist before execution.

    python -m benchlib.report.render [notebooks/01_....py ...] [--out-dir reports]
        [--parameters params.yaml]
"""

from __future__ import annotations

import argparse
import html
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import jupytext
import nbformat
import papermill
import yaml
from jinja2 import DictLoader
from jupyter_client.manager import AsyncKernelManager
from nbconvert import HTMLExporter
from papermill.exceptions import PapermillExecutionError
from papermill.translators import translate_parameters
from plotly.offline import get_plotlyjs

from ..analysis import analyse, project_root, resolve
from ..base import escape, limits
from ..base.errors import ConfigError, NotebookError
from ..base.files import write_atomically
from . import export, method, post, publish

# report order: the answer first, then the results, then how they were measured
NOTEBOOKS = (
    "00_summary.py",
    "02_significance.py",
    "03_figures.py",
    "04_reference.py",
    "05_cpu_profiles.py",
    "06_mesh.py",
    "07_setup_and_method.py",
)

# The lab template, with plotly.js inlined once in the head and none of the
# CDN scripts (require.js, MathJax, mermaid) the report does not need.
_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}
<script type="text/javascript">window.PlotlyConfig = {MathJaxConfig: 'local'};</script>
<script type="text/javascript">{{ resources.plotly_js }}</script>
<script type="text/javascript">
// a figure drawn inside a closed disclosure has no width yet: size it when the disclosure opens
document.addEventListener('toggle', e => {
  if (e.target.open) e.target.querySelectorAll('.plotly-graph-div').forEach(g => Plotly.Plots.resize(g));
}, true);
</script>
{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


KERNEL_LOG = logging.getLogger("kernel")  # not benchlib's: the terminal shows it only with -v (benchlib.base.logs)


class LocalKernelManager(AsyncKernelManager):
    """The notebooks' kernel, reached over unix sockets: it runs on this machine only, and over TCP
    ipykernel warns on every start that its traffic is unencrypted. What the kernel process writes
    to its stderr (ipykernel's and the libraries' warnings, not a cell's output, which the notebook
    keeps) goes to the log, line by line, instead of the terminal."""

    transport = "ipc"

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        # The kernel's sockets in a directory of its own: by default they are kernel-ipc-<n> in the working
        # directory (the project root), where a second report at once takes the first one's, and both die.
        self._socket_dir = tempfile.mkdtemp(prefix="benchlib-kernel-")
        self.ip = os.path.join(self._socket_dir, "kernel-ipc")

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        read, write = os.pipe()
        try:
            await super()._async_launch_kernel(kernel_cmd, **{**kw, "stderr": write})
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)  # the kernel holds its own copy; EOF when it exits
        threading.Thread(target=_log_lines, args=(read,), daemon=True).start()


def _log_lines(fd: int) -> None:
    with open(fd, encoding="utf-8", errors="replace") as stream:
        for line in stream:
            if line.strip():
                KERNEL_LOG.warning(line.rstrip())


def declared_parameters(nb) -> set[str]:
    """The names a notebook's ``parameters`` cell assigns."""
    cell = next((c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    return set(re.findall(r"^(\w+)\s*(?::[^=\n]+)?=", cell.source, re.M)) if cell else set()


def in_project(path: str | Path) -> str:
    """``path`` relative to the project root where it is inside it (as papermill's kernels, which run at
    the root, read it), else as given: so that what a notebook records does not depend on where the
    checkout is."""
    p = Path(path)
    return str(p.relative_to(project_root())) if p.is_absolute() and p.is_relative_to(project_root()) else str(path)


def _project_paths(parameters: dict) -> dict:
    """``parameters`` with each absolute path inside the project relative to its root (`in_project`)."""
    return {k: in_project(v) if isinstance(v, (str, Path)) else v for k, v in parameters.items()}


def execute_notebook(
    source: str | Path,
    output: str | Path,
    parameters: dict | None = None,
    kernel_name: str = "python3",
    published: tuple[Path, dict] | None = None,
) -> Path:
    """Run a jupytext .py notebook with papermill at the project root; write the executed .ipynb.

    The executed notebook records its source, its place and its parameters with paths inside the project
    relative to its root (`in_project`). ``published``: (its place, its parameters) once the staging
    directory it is executed in is swapped in (build_report), which it records instead of the staging's."""
    output = resolve(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    nb = jupytext.read(resolve(source))
    declared = declared_parameters(nb)  # each notebook gets only what it declares: papermill warns on the rest
    given = {k: v for k, v in _project_paths(parameters or {}).items() if k in declared}
    try:
        papermill.execute_notebook(
            nb,
            str(output),
            parameters=given,
            kernel_name=kernel_name,
            cwd=str(project_root()),
            progress_bar=False,
            kernel_manager_class=LocalKernelManager,
        )
    except OSError as exc:  # a full disk while papermill saved the notebook: name what was written
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(output)) from None
    except PapermillExecutionError as exc:
        evalue = " ".join(str(exc.evalue).split())[:300]
        raise NotebookError(
            f"{resolve(source)}: cell {exc.exec_count} raised {exc.ename}: {evalue} (the traceback is in {output})"
        ) from None
    place, recorded = published or (output, parameters or {})
    recorded = {k: v for k, v in _project_paths(recorded).items() if k in declared}
    record_run(output, resolve(source), place, recorded, kernel_name)
    return output


def record_run(executed: Path, source: Path, place: Path, parameters: dict, kernel_name: str) -> None:
    """What the executed notebook at ``executed`` says of its run, rewritten: papermill records the
    notebook object it was given as its input (the whole notebook again) and the paths as given; here
    ``source``, ``place`` and ``parameters`` are recorded, in its metadata and its injected parameters cell."""
    nb = nbformat.read(executed, as_version=4)
    nb.metadata.papermill.update(input_path=in_project(source), output_path=in_project(place), parameters=parameters)
    language = nb.metadata.get("kernelspec", {}).get("language", "python")
    for cell in nb.cells:
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell.source = translate_parameters(kernel_name, language, parameters)
    write_atomically(executed, lambda tmp: nbformat.write(nb, tmp))


_HEADING = re.compile(r"^(#{1,2}) +(.+?) *#*$", re.M)


def _headings(cell) -> list[tuple[int, str]]:
    """The level-1 and -2 headings a cell shows: its own Markdown, or the Markdown its outputs display."""
    texts = (
        [cell.source]
        if cell.cell_type == "markdown"
        else [o.get("data", {}).get("text/markdown", "") for o in cell.get("outputs", [])]
    )
    return [(len(h), t) for text in texts for h, t in _HEADING.findall(re.sub(r"```.*?```", "", text, flags=re.S))]


def contents(cells) -> str:
    """A table of contents of the page as one Markdown paragraph: each section, its subsections in
    brackets. Links go to the ids nbconvert gives headings (the text, spaces as dashes, URL-quoted)."""

    def link(text: str) -> str:
        shown = re.sub(r"(?<!\\)[`*]", "", text)  # the heading's own emphasis goes, escaped data stays
        # the heading's text as the page shows it, and the id nbconvert makes of it (its _convert_header_id);
        # a raw <a>, since a Markdown link would quote the id again where it holds a quote or a percent
        plain = html.unescape(re.sub(r"\\(.)", r"\1", re.sub(r"<[^>]+>", "", shown)))
        target = quote(plain.replace(" ", "-"), safe="?/:@!$&'()*+,;=")
        return f'<a href="#{html.escape(target)}">{shown}</a>'

    sections: list[tuple[str, list[str]]] = []
    for cell in cells:
        for level, text in _headings(cell):
            if level == 1:
                sections.append((link(text), []))
            elif sections:
                sections[-1][1].append(link(text))
    items = [title + (f" ({', '.join(subs)})" if subs else "") for title, subs in sections]
    return '<nav aria-label="Contents">\n\n**Contents**: ' + " · ".join(items) + "\n\n</nav>"


FIRST_SCREEN = '<header class="first-screen"'


_REPORT_TITLE = re.compile(r'<h1 class="report-title"[^>]*>([^<]*)</h1>')


def _html_outputs(cell) -> str:
    """The HTML a code cell displays, joined."""
    return "".join(
        "".join(o.get("data", {}).get("text/html", "")) for o in cell.get("outputs", []) if cell.cell_type == "code"
    )


def render_report(executed: Sequence[str | Path], output: str | Path, title: str | None = None) -> Path:
    """Concatenate executed notebooks into one HTML page: code hidden, plotly.js inlined once, no CDN."""
    cells = []
    for path in executed:
        # a code cell that displays nothing would still take a cell's margins on the page (inputs are hidden)
        cells += [c for c in nbformat.read(resolve(path), as_version=4).cells if c.cell_type != "code" or c.outputs]
    # the contents after the report's first screen (summary.first_screen_html) where it has one, else first
    at = next((i + 1 for i, c in enumerate(cells) if FIRST_SCREEN in _html_outputs(c)), 0)
    # the page's <title>: the one the user gave (report.title), else the report's own heading, as a tab
    # or a bookmark shows it
    heading = _REPORT_TITLE.search(_html_outputs(cells[at - 1])) if at else None
    title = title or (html.unescape(heading.group(1)) if heading else "CNI network benchmark report")
    merged = nbformat.v4.new_notebook(
        cells=[*cells[:at], nbformat.v4.new_markdown_cell(contents(cells)), *cells[at:]], metadata={"title": title}
    )
    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"benchlib_report.html.j2": _TEMPLATE})],
        template_file="benchlib_report.html.j2",
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )
    page, _ = exporter.from_notebook_node(merged, resources={"plotly_js": get_plotlyjs()})
    # nbconvert's mistune makes a link of any scheme it is given: none but http(s) stays one
    page = escape.links(page)
    output = resolve(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # a full disk leaves the previous page whole, and names it
    return write_atomically(output, lambda tmp: tmp.write_text(page, encoding="utf-8"))


def default_jobs() -> int:
    """Notebooks run at once by default: one per CPU this process may use."""
    return len(os.sched_getaffinity(0))


def build_report(
    sources: Sequence[str | Path],
    out_dir: str | Path = "reports",
    parameters: dict | None = None,
    title: str | None = None,
    jobs: int | None = None,
) -> Path:
    """Execute each notebook into notebooks/, ``jobs`` at a time (default_jobs()), and render report.html
    with the notebooks in the order given, and the blog post in blog/ (post.write_post); all of it, and
    what the notebooks write (their ``out_dir``), in a staging directory in <out_dir> that is swapped in
    at the end (publish.swap_in). So an interrupted or failing report leaves the previous one as it was;
    a failing notebook's staging directory stays, with the traceback the error names, until the next
    report removes it. Each notebook runs in its own kernel process and reads only the analysis, so they
    run side by side; the figures' folders they share are written under a lock (export.one_writer).
    Returns <out_dir>/report.html."""
    out = resolve(out_dir)
    staging = publish.staging_dir(out)
    try:
        html = _build(sources, staging, out, parameters or {}, title, jobs)
        publish.swap_in(staging, out)
    except NotebookError:
        raise  # its staging directory holds the failed notebook the message names
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out / html.name


def _build(
    sources: Sequence[str | Path], staging: Path, out: Path, parameters: dict, title: str | None, jobs: int | None
) -> Path:
    """build_report's files, written into ``staging``; the notebooks record ``out`` as where they are."""

    def execute(src: str | Path) -> Path:
        name = Path(src).stem + ".ipynb"
        published = (out / "notebooks" / name, {**parameters, "out_dir": out})
        return execute_notebook(
            src, staging / "notebooks" / name, {**parameters, "out_dir": staging}, published=published
        )

    with ThreadPoolExecutor(max_workers=jobs or default_jobs(), thread_name_prefix="notebook") as pool:
        futures = [pool.submit(execute, src) for src in sources]
        try:
            executed = [f.result() for f in futures]  # the first failing notebook in report order is named
        except BaseException:
            pool.shutdown(cancel_futures=True)  # the notebooks not started yet are not started
            raise
    blog = staging / "blog"
    if (blog / "index.md").exists():  # notebooks finish in any order: the index lists the figures by name
        with export.one_writer(blog):
            (blog / "index.md").unlink(missing_ok=True)
            export.blog_index(blog, [])
    # the post chooses among the figures every notebook exported, so it is written once they all have; a
    # campaign with no figure gets one that says why
    blog.mkdir(parents=True, exist_ok=True)
    analysis = analyse.load(resolve(parameters.get("analysis_dir", analyse.ANALYSIS_DIR)))
    post.write_post(blog, analysis, commit=method.code_revision(), title=title)
    return render_report(executed, staging / "report.html", title=title)


COMPARE_NOTEBOOK = "compare.py"


def build_compare(res, out_dir: str | Path = "reports") -> Path:
    """Save the comparison ``res`` (compare.Result) in <out_dir>/compare-A-vs-B/, execute
    notebooks/compare.py on it into <out_dir>/notebooks/ and render <out_dir>/compare-A-vs-B.html
    (offline, like the report)."""
    # rev:campaign names a revision: keep file names to safe characters
    out, stem = resolve(out_dir), re.sub(r"[^A-Za-z0-9._-]", "_", f"compare-{res.a}-vs-{res.b}")
    saved = res.save(out / stem)
    executed = execute_notebook(
        project_root() / "notebooks" / COMPARE_NOTEBOOK, out / "notebooks" / f"{stem}.ipynb", {"result_dir": str(saved)}
    )
    return render_report([executed], out / f"{stem}.html", title=f"{res.b} against {res.a}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchlib.report.render", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "notebooks",
        nargs="*",
        default=[f"notebooks/{n}" for n in NOTEBOOKS],
        help="jupytext .py notebooks, in report order",
    )
    parser.add_argument("--out-dir", default="reports")
    parser.add_argument("--parameters", help="YAML file of papermill parameters passed to every notebook")
    args = parser.parse_args(argv)
    parameters = (
        yaml.safe_load(limits.read_text(resolve(args.parameters), limits.CONFIG_BYTES, ConfigError))
        if args.parameters
        else {}
    )
    print(build_report(args.notebooks, args.out_dir, parameters))


if __name__ == "__main__":
    main()
