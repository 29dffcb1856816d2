#!/usr/bin/env python3
"""Writes chat_sft.jsonl: short, regular conversations (arithmetic, word
games, simple facts) that a tiny model can learn within a demo run.

Deterministic: the same script always writes the same file.
Usage: python3 data/corpus/make_chat.py > data/corpus/chat_sft.jsonl
"""
import json
import random

OPPOSITES = [("hot", "cold"), ("big", "small"), ("fast", "slow"),
             ("up", "down"), ("open", "closed"), ("light", "dark"),
             ("early", "late"), ("full", "empty"), ("happy", "sad"),
             ("old", "young"), ("wet", "dry"), ("strong", "weak"),
             ("high", "low"), ("near", "far"), ("loud", "quiet"),
             ("hard", "soft"), ("thick", "thin"), ("long", "short"),
             ("clean", "dirty"), ("rich", "poor")]
PLURALS = [("cat", "cats"), ("box", "boxes"), ("child", "children"),
           ("mouse", "mice"), ("city", "cities"), ("leaf", "leaves"),
           ("tooth", "teeth"), ("bus", "buses"), ("foot", "feet"),
           ("baby", "babies"), ("sheep", "sheep"), ("knife", "knives"),
           ("man", "men"), ("glass", "glasses"), ("story", "stories"),
           ("fish", "fish"), ("wolf", "wolves"), ("woman", "women"),
           ("goose", "geese"), ("dish", "dishes")]
WORDS = ["garden", "river", "window", "planet", "butter", "silver", "orange",
         "pencil", "forest", "candle", "rabbit", "winter", "button",
         "market", "ladder", "kitten", "bridge", "island", "rocket",
         "summer", "basket", "dragon", "mirror", "pepper", "anchor"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
        "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July",
          "August", "September", "October", "November", "December"]
BRIEF = "You are a helpful assistant. Answer in one short sentence."


def chat(*turns, system=None):
    messages = [{"role": "system", "content": system}] if system else []
    for i, content in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant",
                         "content": content})
    return {"messages": messages}


def main():
    rng = random.Random(1234)
    out = []
    for _ in range(60):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        out.append(chat(f"What is {a} + {b}?", f"{a} + {b} = {a + b}."))
    for _ in range(40):
        a, b = sorted((rng.randint(1, 99), rng.randint(1, 99)), reverse=True)
        out.append(chat(f"What is {a} - {b}?", f"{a} - {b} = {a - b}."))
    for _ in range(30):
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        out.append(chat(f"What is {a} times {b}?", f"{a} x {b} = {a * b}."))
    for word in WORDS:
        out.append(chat(f"Reverse the word \"{word}\".", word[::-1]))
        out.append(chat(f"Write \"{word}\" in capital letters.", word.upper()))
        out.append(chat(f"How many letters are in \"{word}\"?",
                        f"\"{word}\" has {len(word)} letters."))
    for word, opposite in OPPOSITES:
        out.append(chat(f"What is the opposite of \"{word}\"?",
                        f"The opposite of \"{word}\" is \"{opposite}\"."))
    for word, plural in PLURALS:
        out.append(chat(f"What is the plural of \"{word}\"?",
                        f"The plural of \"{word}\" is \"{plural}\"."))
    for i, day in enumerate(DAYS):
        out.append(chat(f"What day comes after {day}?",
                        f"{DAYS[(i + 1) % 7]} comes after {day}.",
                        system=BRIEF))
    for i, month in enumerate(MONTHS):
        out.append(chat(f"Which month comes after {month}?",
                        f"{MONTHS[(i + 1) % 12]} comes after {month}.",
                        system=BRIEF))
    for _ in range(20):
        start, step = rng.randint(1, 20), rng.randint(2, 9)
        seq = [start + step * k for k in range(4)]
        out.append(chat(
            "What number comes next: " + ", ".join(map(str, seq)) + "?",
            f"{seq[-1] + step}, because each number is {step} more than the "
            "one before."))
    for _ in range(20):
        a, b = rng.sample(range(1, 1000), 2)
        out.append(chat(f"Which is larger, {a} or {b}?",
                        f"{max(a, b)} is larger than {min(a, b)}."))
    for _ in range(20):
        a, b, c = rng.randint(1, 50), rng.randint(1, 50), rng.randint(1, 50)
        out.append(chat(f"What is {a} + {b}?", f"{a} + {b} = {a + b}.",
                        f"And if you add {c} more?",
                        f"{a + b} + {c} = {a + b + c}."))
    rng.shuffle(out)
    for conversation in out:
        print(json.dumps(conversation))


if __name__ == "__main__":
    main()
