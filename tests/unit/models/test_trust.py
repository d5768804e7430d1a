"""The trusted-class check that checkpoints and exports share (`treernn.models.trust`): a path
outside the trusted packages is refused before anything is imported."""

from __future__ import annotations

import sys

import pytest

from treernn.models.trust import UntrustedClass, import_trusted, user_prefixes


@pytest.fixture
def planted_package(tmp_path, monkeypatch):
    """A module that leaves a marker file when it is imported."""
    marker = tmp_path / "imported"
    (tmp_path / "planted_pkg.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nclass Model:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "planted_pkg", raising=False)
    yield marker
    sys.modules.pop("planted_pkg", None)


def test_a_class_outside_the_trusted_packages_is_refused_without_importing_it(planted_package):
    with pytest.raises(UntrustedClass) as refused:
        import_trusted("planted_pkg.Model", ("treernn.", "torch.optim."))
    assert refused.value.why == "untrusted"
    assert not planted_package.exists()
    assert "planted_pkg" not in sys.modules


def test_a_trusted_package_gives_its_class(planted_package):
    found = import_trusted("planted_pkg.Model", ("treernn.", "planted_pkg."))
    assert found.__name__ == "Model" and found.__module__ == "planted_pkg"
    assert planted_package.exists()


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("treernn.encoders.nothing.Here", "missing"),
        ("treernn.models.trust.NoSuchClass", "missing"),
        ("treernn.", "missing"),  # an empty module name
        ("treernn.models.trust.user_prefixes", "not a class"),
        (["treernn.models.trust.UntrustedClass"], "untrusted"),  # not a string
        ("treernn_evil.Model", "untrusted"),  # a prefix match must end at a dot
    ],
)
def test_each_refusal_says_why(target, why):
    with pytest.raises(UntrustedClass) as refused:
        import_trusted(target, ("treernn.",))
    assert refused.value.why == why


def test_user_prefixes_end_at_a_dot(monkeypatch):
    monkeypatch.setenv("TREERNN_TRUSTED_MODULES", " mypkg, other.models. ,,")
    assert user_prefixes() == ("mypkg.", "other.models.")
    monkeypatch.delenv("TREERNN_TRUSTED_MODULES")
    assert user_prefixes() == ()
