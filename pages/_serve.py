"""The dashboard's server entry: ``app.py`` behind the host check (gpuledger/web/hosts.py).

``gpuledger dashboard`` runs ``streamlit run pages/_serve.py`` (here, under pages/, because Streamlit belongs
to app.py and pages/ only); Streamlit finds the ``st.App`` below (its supported
way to add ASGI middleware) and serves app.py with every request checked first. ``streamlit run app.py``
still works, without the check (docs/settings.md says so).
"""

from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from gpuledger.web.hosts import HostCheck, from_env

app = st.App(
    Path(__file__).resolve().parent.parent / "app.py", middleware=[Middleware(HostCheck, allowed=from_env())]
)
