"""Where the ideas on these pages come from: the sources, as data.

Every concept the app teaches is mapped to the papers and documentation that define it, so a page
can show a "Sources" box (``cite(concept)``) and the references page can list them all. The
concept names and notes are translated through ``assets/i18n/learn.json`` (``references.c.<concept>``
and ``references.r.<key>.note``); the bibliographic fields below are not translated on purpose:
a title is cited as it was published.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version


@dataclass(frozen=True)
class Reference:
    key: str
    authors: str
    year: int
    title: str
    venue: str
    url: str
    arxiv: str | None = None  # "1706.03762" when the work is on arXiv

    def __post_init__(self) -> None:
        if not self.url.startswith("https://"):
            raise ValueError(f"reference {self.key}: the URL must be https")
        if self.arxiv and self.arxiv not in self.url:
            raise ValueError(f"reference {self.key}: the URL does not point at arXiv:{self.arxiv}")

    def label(self) -> str:
        """A one-line citation, e.g. 'Vaswani et al. (2017). Attention Is All You Need. NeurIPS. arXiv:1706.03762'."""
        tail = f" arXiv:{self.arxiv}" if self.arxiv else ""
        venue = "" if self.arxiv and self.venue == "arXiv" else f" {self.venue}."  # never "arXiv. arXiv:…"
        return f"{self.authors} ({self.year}). {self.title}.{venue}{tail}"


def _arxiv(key: str, authors: str, year: int, title: str, venue: str, arxiv: str) -> Reference:
    return Reference(key, authors, year, title, venue, f"https://arxiv.org/abs/{arxiv}", arxiv)


REFERENCES: dict[str, Reference] = {
    r.key: r
    for r in (
        _arxiv("vaswani2017", "Vaswani et al.", 2017, "Attention Is All You Need", "NeurIPS 2017", "1706.03762"),
        _arxiv("brown2020", "Brown et al.", 2020, "Language Models are Few-Shot Learners", "NeurIPS 2020", "2005.14165"),
        _arxiv("su2021", "Su et al.", 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding",
               "Neurocomputing 2024", "2104.09864"),
        _arxiv("ainslie2023", "Ainslie et al.", 2023,
               "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints", "EMNLP 2023",
               "2305.13245"),
        _arxiv("shazeer2019", "Shazeer", 2019, "Fast Transformer Decoding: One Write-Head is All You Need", "arXiv",
               "1911.02150"),
        _arxiv("dao2022", "Dao et al.", 2022,
               "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness", "NeurIPS 2022", "2205.14135"),
        _arxiv("jain2019", "Jain & Wallace", 2019, "Attention is not Explanation", "NAACL 2019", "1902.10186"),
        Reference("trtllm_kv", "NVIDIA", 2024, "TensorRT-LLM documentation: KV cache system and KV cache reuse",
                  "nvidia.github.io", "https://nvidia.github.io/TensorRT-LLM/features/kvcache.html"),
        _arxiv("allal2025", "Ben Allal et al.", 2025,
               "SmolLM2: When Smol Goes Big — Data-Centric Training of a Small Language Model", "arXiv", "2502.02737"),
        Reference("smollm2_card", "Hugging Face", 2024, "SmolLM2-135M-Instruct model card", "huggingface.co",
                  "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct"),
        Reference("williams1989", "Williams & Zipser", 1989,
                  "A Learning Algorithm for Continually Running Fully Recurrent Neural Networks",
                  "Neural Computation 1(2)", "https://doi.org/10.1162/neco.1989.1.2.270"),
        _arxiv("wolf2020", "Wolf et al.", 2020, "Transformers: State-of-the-Art Natural Language Processing",
               "EMNLP 2020 (System Demonstrations)", "1910.03771"),
        _arxiv("ba2016", "Ba, Kiros & Hinton", 2016, "Layer Normalization", "arXiv", "1607.06450"),
        _arxiv("zhang2019", "Zhang & Sennrich", 2019, "Root Mean Square Layer Normalization", "NeurIPS 2019", "1910.07467"),
        _arxiv("xiong2020", "Xiong et al.", 2020, "On Layer Normalization in the Transformer Architecture", "ICML 2020",
               "2002.04745"),
        _arxiv("press2021", "Press, Smith & Lewis", 2021,
               "Train Short, Test Long: Attention with Linear Biases Enables Input Length Extrapolation", "ICLR 2022",
               "2108.12409"),
    )
}

# concept → the sources that define or measure it (first = the primary source)
CONCEPTS: dict[str, tuple[str, ...]] = {
    "transformer": ("vaswani2017",),
    "attention": ("vaswani2017", "jain2019"),
    "multihead": ("vaswani2017", "shazeer2019", "ainslie2023"),
    "decoder_only": ("brown2020", "vaswani2017"),
    "positions": ("su2021", "vaswani2017", "press2021"),
    "gqa": ("ainslie2023", "shazeer2019"),
    "kv_cache": ("trtllm_kv", "shazeer2019", "ainslie2023"),
    "flash_attention": ("dao2022",),
    "sampling": ("brown2020",),
    "model": ("allal2025", "smollm2_card"),
    "library": ("wolf2020",),
    "training": ("williams1989", "vaswani2017"),
    "norms": ("ba2016", "zhang2019", "xiong2020"),
}


def cite(concept: str) -> list[Reference]:
    """The sources of ``concept`` (primary first). Unknown concepts raise, so a typo fails a test."""
    try:
        keys = CONCEPTS[concept]
    except KeyError:
        raise KeyError(f"unknown concept '{concept}'; known: {', '.join(CONCEPTS)}") from None
    return [REFERENCES[k] for k in keys]


def concepts_of(key: str) -> list[str]:
    """The concepts a reference is cited for (inverse of ``cite``)."""
    return [c for c, keys in CONCEPTS.items() if key in keys]


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries that compute the numbers (read from package metadata,
    so nothing heavy is imported)."""
    out = {}
    for name in ("transformers", "torch", "streamlit", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "—"
    return out


PROVENANCE_FACTS = ("name", "model_type", "n_params", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_model",
                    "d_ff", "vocab_size", "norm_type", "position_type", "rope_theta", "ffn_type", "tied_embeddings", "dtype")


def provenance_rows(facts: dict, source: str) -> list[tuple[str, str]]:
    """(fact, value) rows describing the model behind every number: its config facts, where the
    weights were loaded from (``source``: the public description, ``LoadedModel.public_source``, never a
    server path), and the library versions."""
    rows = [(k, f"{facts[k]:,}" if isinstance(facts.get(k), int) and not isinstance(facts.get(k), bool) else str(facts.get(k)))
            for k in PROVENANCE_FACTS if k in facts]
    rows.append(("source", source))
    rows += [(f"{lib} version", v) for lib, v in library_versions().items()]
    return rows


def _md_cell(text: str) -> str:
    """Text safe inside a Markdown table cell: a pipe would start a new cell, a line break a new row."""
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown_table(refs: list[Reference], headers: tuple[str, str, str], used_for: dict[str, str]) -> str:
    """Every reference as one row of a Markdown table — the title linked, authors and venue beside it,
    the year, and the concepts it is cited for — so long titles wrap instead of being cut off.
    ``headers``: (reference, year, used for) in the page's language; ``used_for``: key → text."""
    year = "\u2060".join(_md_cell(headers[1]))  # word joiners: the narrow year column never splits 年份 over two lines
    rows = [f"| {_md_cell(headers[0])} | {year} | {_md_cell(headers[2])} |", "|---|---|---|"]
    for r in refs:
        ref = f"{_md_cell(r.authors)} — [{_md_cell(r.title)}]({r.url}) · {_md_cell(r.venue)}"
        rows.append(f"| {ref} | {r.year} | {_md_cell(used_for.get(r.key, ''))} |")
    return "\n".join(rows)
