"""The index behind the `lookup` strategy: a suffix automaton over the committed tokens (prompt + output)
that also counts, for each of its states, which tokens followed that state's occurrences.

A state of a suffix automaton is a set of substrings that end at the same positions of the text (their
end set); `link` leads to the state of the longest suffix that ends at more places. So every substring
of the text is one walk from the root, and the suffixes of the text are the chain of links from the
state of the whole text. `follow[s][t]` counts the end positions e of state s with text[e + 1] == t
(the occurrences that something followed); `best[s]` is the most frequent of those tokens, ties to the
one that followed most recently, with its count and latest position.

Cost: appending a token is the textbook online construction (O(1) amortized transitions and clones)
plus one count update on each state of the text's suffixes with length in [ngram_min, ngram_max]
(at most ngram_max - ngram_min + 2 states): the work per token does not grow with the context. Memory is
linear in the tokens seen: at most 2n - 1 states and 3n - 4 transitions for n >= 3 tokens, and a state
counts only tokens it has a transition on, so `follow` holds no more entries than there are transitions.

Matching bounded by ngram_max: a `Match` is the state holding the longest suffix (of a text that may end
in drafted, uncommitted tokens) of length at most ngram_max that occurs in the committed text, with that
length. Appending one token to it moves along one transition (or down the links first): O(1) amortized.
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT = 0  # the state of the empty string


@dataclass(frozen=True)
class Match:
    """state: the automaton state holding the matched suffix; length: that suffix's length (0: none)."""

    state: int
    length: int


@dataclass(frozen=True)
class Continuation:
    """One drafted token: the suffix of `length` tokens that was matched; `token`, which followed it
    `count` of the `total` times anything did; `position`, the index of the latest such `token` in the
    text (that occurrence of the match starts at position - length)."""

    token: int
    length: int
    count: int
    total: int
    position: int

    @property
    def start(self) -> int:
        """Index where the latest occurrence of the match that `token` followed begins."""
        return self.position - self.length


@dataclass(frozen=True)
class IndexSize:
    """states (root included), transitions, and (state, token) follow counts held."""

    states: int
    transitions: int
    follow_entries: int


class SuffixIndex:
    """Tokens so far in a suffix automaton; finds the longest suffix match within [ngram_min, ngram_max]
    and its most frequent continuation. Only committed tokens enter it (`append`); drafted ones are
    matched through `step` without changing it, so a rejected draft needs no rewind."""

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max (got {ngram_min}, {ngram_max})")
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self.tokens: list[int] = []
        self._len: list[int] = [0]  # longest string of each state
        self._link: list[int] = [-1]  # suffix link (-1 for the root)
        self._next: list[dict[int, int]] = [{}]  # transitions
        self._follow: list[dict[int, int]] = [{}]  # token -> how often it followed the state's strings
        self._total: list[int] = [0]  # sum of _follow[s]
        self._best: list[tuple[int, int, int] | None] = [None]  # (token, count, latest position)
        self._last = ROOT  # the state of the whole text
        self._tail = Match(ROOT, 0)  # the text's longest suffix of length <= ngram_max

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def tail(self) -> Match:
        """The match of the committed text itself: its last min(len, ngram_max) tokens."""
        return self._tail

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            self.append(token)

    def append(self, token: int) -> None:
        """Commit one token: count it as the continuation of the text's bounded suffixes, then extend
        the automaton and move the tail along it."""
        self._count(token, len(self.tokens))
        self._extend(token)
        self.tokens.append(token)
        # If the tail's state was just split, its clone has the same transitions, so this is exact.
        self._tail = self._advance(self._tail, token)

    def _count(self, token: int, position: int) -> None:
        """token (at `position`) follows every suffix of the text: count it for the suffixes' states
        whose lengths reach [ngram_min, ngram_max] (those a match can land on)."""
        state = self._tail.state
        while state != ROOT and self._len[state] >= self.ngram_min:
            count = self._follow[state].get(token, 0) + 1
            self._follow[state][token] = count
            self._total[state] += 1
            best = self._best[state]
            if best is None or count >= best[1]:  # a tie goes to the latest: this one
                self._best[state] = (token, count, position)
            state = self._link[state]

    def _new_state(self, length: int, link: int, source: int | None = None) -> int:
        """A state of `length` linked to `link`; a clone of `source` copies its transitions and counts."""
        self._len.append(length)
        self._link.append(link)
        if source is None:
            self._next.append({})
            self._follow.append({})
            self._total.append(0)
            self._best.append(None)
        else:
            self._next.append(dict(self._next[source]))
            self._follow.append(dict(self._follow[source]))
            self._total.append(self._total[source])
            self._best.append(self._best[source])
        return len(self._len) - 1

    def _extend(self, token: int) -> None:
        """The online suffix automaton step for `token`."""
        cur = self._new_state(self._len[self._last] + 1, ROOT)
        state = self._last
        while state != -1 and token not in self._next[state]:
            self._next[state][token] = cur
            state = self._link[state]
        self._last = cur
        if state == -1:
            return
        target = self._next[state][token]
        if self._len[state] + 1 == self._len[target]:
            self._link[cur] = target
            return
        clone = self._new_state(self._len[state] + 1, self._link[target], source=target)
        while state != -1 and self._next[state].get(token) == target:
            self._next[state][token] = clone
            state = self._link[state]
        self._link[target] = self._link[cur] = clone

    def _advance(self, match: Match, token: int) -> Match:
        """The match after `token` follows the matched text: the longest suffix of (matched text + token)
        that occurs in the committed text, at most ngram_max long (Match(ROOT, 0) when token never
        occurred)."""
        state, length = match.state, match.length
        while state != ROOT and token not in self._next[state]:
            state = self._link[state]
            length = self._len[state]
        if token not in self._next[state]:
            return Match(ROOT, 0)
        state, length = self._next[state][token], length + 1
        if length > self.ngram_max:  # one token too long: the bounded suffix is here or one link down
            length = self.ngram_max
            if self._len[self._link[state]] >= length:
                state = self._link[state]
        return Match(state, length)

    def step(self, match: Match, token: int) -> Match:
        """The match after a drafted (uncommitted) `token`; the index is unchanged."""
        return self._advance(match, token)

    def continuation(self, match: Match) -> Continuation | None:
        """The longest suffix of the match, at least ngram_min long, that something followed in the text,
        and its most frequent follower (ties: the most recent); None when no such suffix exists."""
        state, length = match.state, match.length
        while state != ROOT and length >= self.ngram_min:
            best = self._best[state]
            if best is not None:
                token, count, position = best
                return Continuation(token, length, count, self._total[state], position)
            state = self._link[state]
            length = self._len[state]
        return None

    def followers(self, match: Match, width: int) -> list[tuple[int, float]]:
        """Up to `width` tokens that followed suffixes of the match, with their weights: first those
        that followed the longest suffix (at least ngram_min long) anything followed, most frequent
        first (its `continuation` token first among equals), each weighted by its share of those
        occurrences; then, while fewer than `width`, those that followed only shorter suffixes (where a
        short match branched that the long one did not), weighted by their share there times the
        longer suffix's escape estimate d / (n + d) (n occurrences, d distinct followers: PPM's method
        C). [] when no suffix of at least ngram_min tokens was followed. The branches of a lookup tree
        (SuffixDecoding)."""
        found: list[tuple[int, float]] = []
        seen: set[int] = set()
        escape = 1.0  # the weight left for tokens only shorter suffixes were followed by
        state, length = match.state, match.length
        while state != ROOT and length >= self.ngram_min and len(found) < width:
            best = self._best[state]
            if best is not None:
                total, counts = self._total[state], self._follow[state]
                ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0] != best[0]))
                for token, count in ranked:
                    if token not in seen and len(found) < width:
                        found.append((token, escape * count / total))
                        seen.add(token)
                escape *= len(counts) / (total + len(counts))
            state = self._link[state]
            length = self._len[state]
        return found

    def draft(self, k: int, match: Match | None = None) -> list[Continuation]:
        """Up to k tokens continuing the text (from `match`, default the tail), each the most frequent
        follower of the longest match of the text plus the tokens drafted before it; fewer when no
        suffix of at least ngram_min tokens was ever followed."""
        match = self._tail if match is None else match
        drafted: list[Continuation] = []
        while len(drafted) < k:
            found = self.continuation(match)
            if found is None:
                break
            drafted.append(found)
            match = self.step(match, found.token)
        return drafted

    def size(self) -> IndexSize:
        return IndexSize(
            states=len(self._len),
            transitions=sum(len(edges) for edges in self._next),
            follow_entries=sum(len(counts) for counts in self._follow),
        )
