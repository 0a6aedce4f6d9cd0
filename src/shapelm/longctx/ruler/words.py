"""English word lists for RULER's needles (adjective-noun keys) and common-words task.

NVIDIA's RULER draws these from the ``wonderwords`` package (3.x, MIT licence): its nounlist,
adjectivelist and verblist (8,166 distinct words), read exactly as RULER's niah.py and
common_words_extraction.py read them. Which lists a task uses is chosen, never detected:
``longctx.ruler_word_lists`` (``ruler-generate --word-lists``) is ``wonderwords`` in
configs/paper.yaml and ``builtin`` (the default) elsewhere: the built-in lists below (common
English words, a few hundred each) keep the tiny default's RULER data as it was, whether or not
``wonderwords`` is installed. A word-list file (one word per line, or a JSON list or dict of words
such as RULER's ``english_words.json``) can extend either for very long contexts; beyond all of
these, deterministic pronounceable pseudo-words are added (the built-in lists run out at a few
thousand tokens; wonderwords' lists hold the 65,536-token common-words task of the paper config).
"""

from __future__ import annotations

import functools

import json
import os
from pathlib import Path

from shapelm.errors import ConfigError

ADJECTIVES = """
able abrupt absent acidic active adorable agile alert alive amber ancient angry ashamed awake
bad bald bashful bitter black bland blue bold bouncy brave brief bright brisk broad broken
brown bumpy busy calm careful cheap cheerful chilly clean clever cloudy clumsy cold colossal
cool crazy creamy crisp crooked cruel curly curved damp dark deep delicate dense dirty dizzy
dry dull dusty eager early earnest easy elastic elegant empty enormous equal even exact
faint fair famous fancy fast fat fierce filthy flat fluffy foolish fragile frail free fresh
friendly frozen full funny fuzzy gentle giant gifted glad gleaming glossy golden good grand
gray greasy great green grumpy hairy handsome happy hard harsh heavy helpful hollow honest
hot huge humble hungry icy idle immense itchy jolly juicy keen kind large late lazy lean
light little lively lonely long loose loud lovely low lucky lumpy mad massive mature meek
mellow messy mighty mild misty modern moist narrow nasty neat nervous new nice noisy odd
old orange pale patient plain plump polite poor proud purple quick quiet rapid rare raw
ready red rich ripe rough round royal rude rural rusty sad safe salty scary shaggy shallow
sharp shiny short shy silent silky silly simple slim slow small smooth soft solid sour
spicy splendid square steep sticky stiff stormy strange strict strong sturdy sunny sweet
swift tall tame tart tender thick thin tidy tiny tough tricky ugly urban vast violet vivid
warm weak wealthy weary wet white wide wild windy wise witty wooden yellow young zany zealous
""".split()

NOUNS = """
acorn actor airport album alley anchor angle ankle apple apron arch arena army arrow artist
attic author autumn avenue bakery balcony ball balloon banana band bank barn barrel basket
battery beach beard bell belt bench berry bicycle bird blanket blossom boat bone book boot
bottle boulder bowl box bracelet branch bread brick bridge brother bubble bucket budget
building bulb butter button cabin cable cake camera camp canal candle canoe canyon captain
car card carpet carrot castle cat cave ceiling cellar chair chalk cherry chest chicken
chimney church circle city cliff clock cloud coast coat coffee coin comet compass cookie
copper corner cottage cotton country cousin crayon creek crown cup curtain cushion dancer
desert desk diamond dinner doctor dog dolphin door dragon drawer dream drum eagle earth
elbow engine envelope eraser falcon farm feather fence festival field finger fire fish flag
flame flower flute fog forest fork fountain fox frog fruit garage garden gate giraffe glass
glove goat gold guitar hammer harbor hat hawk heart helmet hill honey horse hospital hotel
house island jacket jar jewel journal jungle kettle key kingdom kitchen kite knee knife
ladder lake lamp lantern leaf lemon letter library lighthouse lily lion lizard lobster lock
magnet mango map marble market meadow melon mirror monkey moon mountain mouse museum
napkin needle nest newspaper night notebook ocean office olive onion orange orchard otter
oven owl paddle painter palace pancake panda paper parrot path peach pearl pebble pencil
pepper piano picture pillow pilot planet plate pocket pond potato puzzle pyramid queen rabbit
radio rain river road robot rocket roof rose saddle sailor salad sand scarf school scissors
seed shadow shell ship shoe shovel singer sister sky snail snow soap sock sofa soldier spider
spoon spring square squirrel stable staircase star station statue stone storm stove street
sugar suitcase summer sun sweater table tailor teacher tent theater thunder tiger toast
tomato tower town toy tractor train tree truck tulip tunnel turtle umbrella valley vase
village violin volcano wagon wall wallet whale wheel whistle window winter wizard wolf
yacht yard zebra
""".split()

VERBS = """
accept admire allow answer arrive bake balance bathe behave blink boil borrow bounce breathe
build buzz calculate carry carve chase cheer chew clap climb collect comb count crawl dance
decide deliver dig dive divide drag draw dream drift drink drop dry earn enjoy escape explain
explore fasten fetch fill float fold follow gather glow grab greet grow guard guess hammer
hang help hike hop hug hunt hurry imagine invent jog join juggle jump kick kneel knit knock
laugh launch lead learn lift listen march measure melt mend mix nod open paddle paint pause
peel pinch plant play polish pour pray print pull pump push race rake reach read relax repair
rescue ride rinse roar roll rush sail scatter scream search sew shake shiver shout sing sip
sketch skip sleep slide smile sneeze sniff solve sort splash spin squeeze stack stir stretch
surf swim swing talk taste teach throw tickle travel trust tumble twist unlock visit wade
walk wander wash watch wave weave whisper whistle wink wonder wrap write yawn yell zip
""".split()


BUILTIN, WONDERWORDS = "builtin", "wonderwords"
WORD_LISTS = (BUILTIN, WONDERWORDS)  # longctx.ruler_word_lists


def _wonderwords() -> tuple[list[str], list[str], list[str]]:
    try:
        from wonderwords import random_word  # type: ignore
    except ImportError:
        raise ConfigError("longctx.ruler_word_lists: wonderwords, but the wonderwords package is not installed "
                          "(it is a dependency of shapelm: `make env`)") from None
    get = random_word._get_words_from_text_file
    return get("nounlist.txt"), get("adjectivelist.txt"), get("verblist.txt")


def word_lists(source: str = BUILTIN) -> tuple[list[str], list[str], list[str]]:
    """(nouns, adjectives, verbs) of `source` (WORD_LISTS)."""
    if source == WONDERWORDS:
        return _wonderwords()
    if source != BUILTIN:
        raise ConfigError(f"longctx.ruler_word_lists: {source!r}; one of {', '.join(WORD_LISTS)}")
    return NOUNS, ADJECTIVES, VERBS


def word_source(source: str = BUILTIN) -> str:
    """How the generated data's notes name the lists (the tiny default's: "built-in")."""
    word_lists(source)  # refuses an unknown source, or wonderwords when it is not installed
    return WONDERWORDS if source == WONDERWORDS else "built-in"


def needle_words(source: str = BUILTIN) -> list[str]:
    """Sorted unique adjective-noun keys, as RULER's niah.py builds them (wonderwords': 6.2M
    keys, ~9 s to build: built once per process, every task and length shares them)."""
    return list(_needle_words(source))


@functools.lru_cache(maxsize=4)
def _needle_words(source: str) -> tuple[str, ...]:
    nouns, adjs, _ = word_lists(source)
    return tuple(sorted({f"{a}-{n}" for a in adjs for n in nouns}))


def common_words(source: str = BUILTIN) -> list[str]:
    """Sorted unique nouns + adjectives + verbs (RULER's common_words_extraction.py)."""
    nouns, adjs, verbs = word_lists(source)
    return sorted(set(nouns + adjs + verbs))


def read_word_list(path: str | os.PathLike) -> list[str]:
    """Words from a file: JSON list/dict (values, as RULER's english_words.json) or one per line."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".json":
        obj = json.loads(text)
        words = list(obj.values()) if isinstance(obj, dict) else list(obj)
    else:
        words = text.split()
    return sorted({str(w).strip() for w in words if str(w).strip()})


_ONSETS = "b c d f g h j k l m n p r s t v w z br cl dr fl gr pl st tr".split()
_VOWELS = "a e i o u ai ea oo".split()


def pseudo_words(n: int, exclude: set[str]) -> list[str]:
    """``n`` deterministic pronounceable pseudo-words of three syllables, not in ``exclude``."""
    out = []
    for o1 in _ONSETS:
        for v1 in _VOWELS:
            for o2 in _ONSETS:
                for v2 in _VOWELS:
                    for o3 in _ONSETS[:12]:
                        w = o1 + v1 + o2 + v2 + o3
                        if w not in exclude:
                            out.append(w)
                            if len(out) == n:
                                return out
    return out
