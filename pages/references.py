"""References: every concept with its sources, and the provenance of the numbers on these pages."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.learn import references
from core.web import page, ui


def render() -> None:

    st.header(ui.t("references.concepts"))
    cols = st.columns(2)
    for i, concept in enumerate(references.CONCEPTS):
        with cols[i % 2].container(border=True, key=f"references_c_{concept}"):
            st.markdown(f"**{ui.t(f'references.c.{concept}')}**")
            st.markdown("\n".join(f"- [{r.label()}]({r.url})" for r in references.cite(concept)))

    st.header(ui.t("references.all"))
    refs = sorted(references.REFERENCES.values(), key=lambda r: (r.year, r.authors))
    sep = "、" if ui.lang() == "zh" else ", "  # a Chinese list takes the enumeration comma
    used_for = {r.key: sep.join(ui.t(f"references.c.{c}") for c in references.concepts_of(r.key)) for r in refs}
    headers = (ui.t("references.col.ref"), ui.t("references.col.year"), ui.t("references.col.for"))
    with st.container(key="references_table"):  # a Markdown table: titles wrap and stay links, nothing is cut
        st.markdown(references.markdown_table(refs, headers, used_for))  # no source badge: a list of papers is no computed number

    st.header(ui.t("references.prov.title"))
    loaded = ui.loaded_model()
    if loaded is None:
        return
    versions = references.library_versions()
    source = ui.model_source(loaded)  # never the server's path to the weights
    st.markdown(ui.t("references.prov.body", model=loaded.facts.name, params=f"{loaded.facts.n_params:,}",
                     source=source, tf=versions["transformers"], torch=versions["torch"]))
    rows = references.provenance_rows(loaded.facts.to_dict(), source)
    st.table(pd.DataFrame(rows, columns=[ui.t("references.prov.col.fact"), ui.t("references.prov.col.value")]),
             hide_index=True)
    ui.badge("model")


page.run(render)
