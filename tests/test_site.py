import pytest

from forensics.core.errors import BadSite
from forensics.core.site import gemm_site, parse_occurrence, parse_site, parse_site_or_occurrence, split_label


@pytest.mark.parametrize("text", ["gemm:NT:acc0:grad1", "gemm:TN:acc0:grad0", "gemm:NN:acc1:grad1",
                                  "index_add:acc1:grad0", "aten.mm.default", "aten.mm", "moe_dispatch:grad0"])
def test_round_trip(text):
    assert str(parse_site(text)) == text


def test_gemm_fields():
    s = parse_site("gemm:NT:acc0:grad1")
    assert (s.kind, s.layout, s.acc, s.grad, s.is_gemm) == ("gemm", "NT", 0, 1, True)
    assert gemm_site("NT", False, True) == s


def test_other_and_aten_fields():
    s = parse_site("index_add:acc1:grad0")
    assert (s.kind, s.layout, s.acc, s.grad) == ("index_add", None, 1, 0)
    a = parse_site("aten.addmm.default")
    assert a.is_aten and a.acc is None


def test_occurrence():
    o = parse_occurrence("gemm:NT:acc0:grad1#3")
    assert o.n == 3 and str(o.site) == "gemm:NT:acc0:grad1" and str(o) == "gemm:NT:acc0:grad1#3"
    assert split_label("gemm:NT:acc0:grad1#3") == ("gemm:NT:acc0:grad1", 3)
    assert split_label("aten.mm.default") == ("aten.mm.default", None)
    assert str(parse_site_or_occurrence("aten.mm.default#2")) == "aten.mm.default#2"


@pytest.mark.parametrize("bad,hint", [
    ("", "empty site"),
    ("gemm:XY:acc0:grad1", "layout 'XY'"),
    ("gemm:NT:acc2:grad1", "acc0 or acc1"),
    ("gemm:NT:acc0", "gemm:<NN|NT|TN|TT>"),
    ("gemm:NT:acc0:grad1#0", "occurrence"),
    ("Index_Add:acc1", "lower-case"),
    ("index_add:accX", "<name><integer>"),
    ("index_add:acc1:acc0", "twice"),
    ("mm", "not a site"),
])
def test_malformed_sites_say_what_is_wrong(bad, hint):
    with pytest.raises(BadSite) as e:
        parse_site_or_occurrence(bad)
    msg = str(e.value)
    assert hint in msg and "\n" not in msg


def test_occurrence_number_must_be_positive():
    with pytest.raises(BadSite, match=">= 1"):
        parse_occurrence("gemm:NT:acc0:grad1#0")
    with pytest.raises(BadSite):
        parse_site("gemm:NT:acc0:grad1#2")


def test_gemm_labels_and_names_are_the_grammars():
    from forensics.core.site import gemm_meta_from_strides, is_gemm_label, names_gemm

    assert is_gemm_label("gemm:NT:acc0:grad1") and is_gemm_label("gemm:NT:acc1:grad1#3")
    assert not is_gemm_label("gemm") and not is_gemm_label("gemmx:NT") and not is_gemm_label(float("nan"))
    # every aten op of core/ops.GEMM, in-place and epilogue variants too (the old prefix list missed these)
    assert names_gemm("aten.addbmm.default#2") and names_gemm("aten._addmm_activation.default")
    assert names_gemm("aten.addmm_.default") and not names_gemm("aten.sum.default#1")
    x = ((8, 4), (4, 1))  # row-major
    wt = ((4, 3), (1, 4))  # W.t() of a row-major W (3, 4)
    assert gemm_meta_from_strides("aten.mm.default", [x, wt], "forward") == {"layout": "TN", "acc": 0, "grad": 0}
    assert gemm_meta_from_strides("aten.addmm.default", [((3,), (1,)), x, wt], "backward") == {
        "layout": "TN", "acc": 1, "grad": 1}
    assert gemm_meta_from_strides("aten.bmm.default", [x, wt], "forward") is None  # not a 2-D GEMM
    assert gemm_meta_from_strides("prims.mm.default", [x, wt], "forward") is None
