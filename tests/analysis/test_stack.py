"""The project's table library is polars: no module of ours or notebook imports pandas."""

import re

from benchlib.analysis import project_root

PANDAS_IMPORT = re.compile(r"^\s*(import pandas|from pandas)\b", re.M)


def test_no_pandas_in_the_package_or_the_notebooks():
    root = project_root()
    files = [*root.glob("benchlib/**/*.py"), *root.glob("notebooks/*.py")]
    assert len(files) > 20
    assert [str(f.relative_to(root)) for f in files if PANDAS_IMPORT.search(f.read_text())] == []
