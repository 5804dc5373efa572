"""pages/_ui.py ``require_router`` uses one private Streamlit API, ``PagesManager.uses_pages_directory``; this
test fails loudly when a Streamlit upgrade changes what that relies on (issue 48).

Why a private API: with a ``pages/`` folder next to app.py, Streamlit runs a deep link's page file on its own
(the old directory navigation, ``_mpa_v1``) until the first ``st.navigation`` call in the process, which
sets ``PagesManager.uses_pages_directory = False``. No public call switches it without running the
navigation, and renaming pages/ would move every page and test. So the guard checks the three facts the
switch stands on, in the Streamlit installed: the attribute is where we set it, ``st.navigation`` sets it the
same way, and the script runner still reads it to choose the directory navigation. If one fails, read
require_router's docstring, check a deep link (tests/browser/test_dashboard_command.py), and update both."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest


@pytest.fixture()
def pages_manager():
    from streamlit.runtime.pages_manager import PagesManager

    before = PagesManager.uses_pages_directory
    yield PagesManager
    PagesManager.uses_pages_directory = before


def test_the_flag_require_router_sets_is_still_a_class_attribute(pages_manager) -> None:
    assert "uses_pages_directory" in vars(pages_manager), "PagesManager.uses_pages_directory is gone"


def test_streamlit_still_turns_the_flag_on_for_a_pages_folder(pages_manager, tmp_path: Path) -> None:
    (tmp_path / "pages").mkdir()
    (tmp_path / "app.py").write_text("")
    pages_manager.uses_pages_directory = None
    pages_manager(str(tmp_path / "app.py"))
    assert pages_manager.uses_pages_directory is True
    pages_manager.uses_pages_directory = False  # what require_router does: a new manager keeps it
    pages_manager(str(tmp_path / "app.py"))
    assert pages_manager.uses_pages_directory is False


def test_st_navigation_sets_the_same_flag_and_the_runner_still_reads_it() -> None:
    from streamlit.commands import navigation
    from streamlit.runtime.scriptrunner import script_runner

    assert "PagesManager.uses_pages_directory = False" in inspect.getsource(navigation.navigation), (
        "st.navigation no longer switches off the pages-directory mode this way: re-check require_router"
    )
    runner = inspect.getsource(script_runner)
    assert "if PagesManager.uses_pages_directory:" in runner and "_mpa_v1(" in runner, (
        "the script runner no longer chooses the directory navigation by this flag: re-check require_router"
    )
