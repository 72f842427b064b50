import pytest
from analysis_tables import lab_like_samples, make_tables


@pytest.fixture(scope="session")
def lab_tables():
    return make_tables(lab_like_samples(), failed={("vxlan", "tcp_crr"): 1})
