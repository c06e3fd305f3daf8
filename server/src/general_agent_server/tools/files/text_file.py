"""A text file's bytes as the editing tools see them (UTF-8, LF line endings, no BOM) and back, so edits keep
a file's byte-order mark and its CRLF line endings."""

from __future__ import annotations

from dataclasses import dataclass

from general_agent_server.tools.runtime import ToolFailure

BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class TextFile:
    text: str  # LF line endings, without the BOM
    has_bom: bool
    line_ending: str  # "\r\n" or "\n": what the file used at its first line break

    @staticmethod
    def decode(data: bytes, shown: str) -> TextFile:
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            # Rewriting undecodable bytes would corrupt them, so such files are not edited.
            raise ToolFailure(f"{shown} is not UTF-8 text") from None
        has_bom = content.startswith(BOM)
        if has_bom:
            content = content[1:]
        first_break = content.find("\n")
        crlf = first_break > 0 and content[first_break - 1] == "\r"
        # Only CRLF pairs become LF; a lone CR is content and stays as it is.
        text = content.replace("\r\n", "\n") if crlf else content
        return TextFile(text=text, has_bom=has_bom, line_ending="\r\n" if crlf else "\n")

    def encode(self, text: str) -> bytes:
        """`text` (LF line endings) in this file's format."""
        if self.line_ending == "\r\n":
            text = text.replace("\n", "\r\n")
        return ((BOM if self.has_bom else "") + text).encode("utf-8")


def to_lf(text: str) -> str:
    """Model-supplied text with the line endings the editing tools work in."""
    return text.replace("\r\n", "\n")
