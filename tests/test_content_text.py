"""One rule for the text of a framework message's content, shared by every adapter."""

from __future__ import annotations

import pytest

from aegis_probe.capture.messages import content_text


class Image:  # a framework's own non-text part (AutoGen's Image, for one)
    pass


@pytest.mark.parametrize("content, text", [
    ("plain", "plain"),
    (None, ""),
    (42, "42"),
    (["a", "b"], "a\nb"),
    ([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:..."}}, {"text": "b"}],
     "a\n[image_url]\nb"),
    (["look:", Image()], "look:\n[Image]"),
])
def test_content_text(content, text):
    assert content_text(content) == text
