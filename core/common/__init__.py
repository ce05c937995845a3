"""The common floor, below everything: what every part of the app shares and that knows nothing of a model.
The strings of both languages (``i18n``), number formatting and the one softmax/top-k (``numbers``), the one
reader of whole numbers (``digits``), Markdown/HTML escaping (``escape``), timing statistics (``timing``),
the byte-bounded cache (``memo``) and where the data files live (``paths``). Imports nothing of the project
outside this package."""
