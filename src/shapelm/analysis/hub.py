"""Which Hugging Face models of the paper's Section 4 are in the local cache (no network)."""

from __future__ import annotations

# The GPT-2 family of Tapered Section 4, by the names the hub knows them (the old short id first,
# then its openai-community/ home); which sizes the paper used is not stated: all four.
GPT2_FAMILY = {
    "gpt2": ("gpt2", "openai-community/gpt2"),
    "gpt2-medium": ("gpt2-medium", "openai-community/gpt2-medium"),
    "gpt2-large": ("gpt2-large", "openai-community/gpt2-large"),
    "gpt2-xl": ("gpt2-xl", "openai-community/gpt2-xl"),
}


def hf_cached(repo_id: str) -> bool:
    """Whether a hub model's config and weights are in the local cache."""
    from huggingface_hub import try_to_load_from_cache

    def have(name: str) -> bool:
        return isinstance(try_to_load_from_cache(repo_id, name), str)

    return have("config.json") and (have("model.safetensors") or have("pytorch_model.bin"))


def cached_family(family: dict[str, tuple[str, ...]] = GPT2_FAMILY) -> dict[str, str]:
    """name -> the cached repo id, for the family members whose weights are cached here."""
    found = {}
    for name, ids in family.items():
        for repo_id in ids:
            if hf_cached(repo_id):
                found[name] = repo_id
                break
    return found
