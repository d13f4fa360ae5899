"""Figures of the reports (``report drift``, ``report guardrails``): matplotlib without a
display, a figure as PNG bytes, and a PNG as a self-contained HTML image.

matplotlib comes with the ``report`` extra; the commands check for it before they draw
(``monitor.contract.extras.require_extra``), so it is imported only here, inside the functions.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend: reports are drawn where no display is."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(figure: Any, dpi: int = 110) -> bytes:
    """``figure`` as PNG, and closed: a report draws many and keeps none. Cut to what is
    drawn, a legend outside the axes included."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    pyplot().close(figure)
    return buffer.getvalue()


def png_img(png: bytes, alt: str) -> str:
    """An ``<img>`` carrying ``png`` in a data URI: the page needs no other file."""
    encoded = base64.b64encode(png).decode()
    return (
        f"<img alt='{html.escape(alt, quote=True)}' style='max-width:100%' "
        f"src='data:image/png;base64,{encoded}'>"
    )
