"""The text pipeline: Moses tokenization as fairseq ran it, clean-corpus-n, lowercasing, line handling."""

from __future__ import annotations

import sacremoses

from lnrepro.data import moses
from lnrepro.data import text as T


def test_sacremoses_version_is_the_verified_one():
    # The final-period rule and the dev2010 fidelity (887/887) were verified with this version only.
    assert sacremoses.__version__ == moses.SACREMOSES_VERSION == "0.2.0"


def test_final_period_of_a_line_is_split_unconditionally():
    de, en = moses.make_tokenizer("de"), moses.make_tokenizer("en")
    # Abbreviations and ordinals at the end of a line lose their period (tokenizer.perl of fairseq's days) ...
    assert moses.tokenize_line(de, "Das sind Gesichter usw.") == "Das sind Gesichter usw ."
    assert moses.tokenize_line(de, "Straßen in den U.S.A.") == "Straßen in den U.S.A ."
    assert moses.tokenize_line(de, "wie in den vorhergegangenen 75.") == "wie in den vorhergegangenen 75 ."
    assert moses.tokenize_line(en, "at U.W.") == "at U.W ."
    # ... while inside a line the nonbreaking-prefix rules are unchanged.
    assert moses.tokenize_line(de, "Das ist z.B. gut.") == "Das ist z.B. gut ."
    assert moses.tokenize_line(en, "Mr. Smith went to the U.S. yesterday.") == "Mr. Smith went to the U.S. yesterday ."
    # Multi-dots stay together.
    assert moses.tokenize_line(en, "Wait...") == "Wait ..."


def test_moses_escaping_and_apostrophes():
    en = moses.make_tokenizer("en")
    assert moses.tokenize_line(en, 'He said "it\'s <b> & | [x]"') == (
        "He said &quot; it &apos;s &lt; b &gt; &amp; &#124; &#91; x &#93; &quot;")


def test_blank_lines_pass_through_unchanged():
    de = moses.make_tokenizer("de")
    assert moses.tokenize_line(de, "") == ""
    assert moses.tokenize_line(de, "   ") == "   "


def test_process_pool_gives_the_same_output_in_order():
    lines = [f"Zeile {i}: Hallo, Welt usw." for i in range(9)] + ["", "Ende."]
    one = moses.tokenize_lines(lines, "de", threads=1)
    assert moses.tokenize_lines(lines, "de", threads=2, chunk_size=2) == one
    assert one[0] == "Zeile 0 : Hallo , Welt usw ."


def test_lowercase_and_line_splitting():
    assert T.lowercase(["Straße ÄÖÜ &APOS;"]) == ["straße äöü &apos;"]
    # Only "\n" ends a line (Perl semantics); U+2028 stays inside the line, and raw references replace it.
    assert T.split_lines("a\u2028b\nc\n") == ["a\u2028b", "c"]
    assert T.split_lines("a\nb") == ["a", "b"]
    assert T.raw_reference("  a\u2028b\r ") == "a b"


def test_clean_corpus_semantics():
    long_ok = " ".join(["w"] * 175)
    too_long = " ".join(["w"] * 176)
    src = ["a b", "", long_ok, too_long, "a b c", "a b c d", "  x   y ", "a|b c"]
    tgt = ["c d", "x", long_ok, "w", "a b", "a b", "p q", "d e"]
    r = T.clean_corpus(src, tgt, min_len=1, max_len=175, ratio=1.5)
    # kept: equal lengths, 175 words, ratio exactly 1.5 (3 vs 2), whitespace-normalized pair, pipe removed
    assert r.kept == [0, 2, 4, 6, 7]
    assert r.src == ["a b", long_ok, "a b c", "x y", "ab c"]
    assert r.tgt == ["c d", long_ok, "a b", "p q", "d e"]
    assert r.dropped == {"empty": 1, "too_long": 1, "too_short": 0, "ratio": 1, "word_too_long": 0}


def test_clean_corpus_factored_flag_and_word_length():
    r = T.clean_corpus(["a|b c", "x|y"], ["d e", "z|w"])  # first pair has "|": factored, pipes kept
    assert r.src == ["a|b c", "x|y"]
    r = T.clean_corpus(["a " + "x" * 1001], ["b c"])
    assert r.kept == [] and r.dropped["word_too_long"] == 1
    r = T.clean_corpus(["a b c"], ["a"], min_len=2)
    assert r.dropped["too_short"] == 1


def test_the_dataset_registry_loads_no_tokenizer():
    """Every snakemake start reads the registry (workflow/rules/data.smk): sacremoses, whose import compiles its
    regular expressions, comes only with a preparation that tokenizes."""
    import subprocess
    import sys

    code = "import sys, lnrepro.data.registry; assert 'sacremoses' not in sys.modules, 'sacremoses imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
