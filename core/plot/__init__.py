"""Figure helpers, shared by every area's ``figures.py`` (the toy's included): the one colour palette
(``palette``), token labels safe for a figure (``plotlabels``) and the attention map's views and windows
(``attnview``). Pure Python and numpy: plotly itself is imported only by the figure modules."""
