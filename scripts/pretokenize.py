#!/usr/bin/env python3
"""Turns conversation data into pretokenized JSONL for eagle-train ({"input_ids", "loss_mask"}).

Input records (a JSON array, JSON Lines, optionally .gz), detected per record:
  ShareGPT  {"conversations": [{"from": "human"|"gpt"|"system", "value": "..."}, ...]}
  OpenAI    {"messages": [{"role": "user"|"assistant"|"system", "content": "..."}, ...]}
  Alpaca    {"instruction": "...", "input": "...", "output": "..."}
  Prompts   {"turns": ["...", ...]} (MT-Bench/SPEED-Bench: user turns, no replies; the first is used)
A record's "category" (a string, e.g. SPEED-Bench's "coding") is written to its sample, so that
`eagle-train eval` reports the acceptance per category.

--prompts writes evaluation prompts instead of training samples: each record's turns before its first
reply, rendered with the generation prompt ("Assistant: " or the chat template's), then one trained
end-of-sequence token that marks where the reply starts (eval decodes the target's own reply from there).

Tokenizers (loss_mask is 1 on assistant/output tokens and their end-of-turn token):
  --tokenizer DIR_OR_FILE  a Hugging Face tokenizer folder (tokenizer.json [+ tokenizer_config.json]),
                           or a tokenizer.json file. A folder whose config has a chat_template is
                           rendered with it (needs a fast tokenizer for character offsets); otherwise
                           the simple prompt template below is used.
  --byte-level             no tokenizer: ids are UTF-8 bytes + 3, with 0 = <pad>, 1 = <bos>,
                           2 = <eos> (vocabulary size 259), and the simple prompt template.

Simple prompt template (documented in docs/data.md):
  <bos> "System: {text}\\n\\n" "User: {text}\\n\\n" "Assistant: " {reply} <eos> ...
with only {reply} and <eos> trained.
"""
import argparse
import gzip
import json
import os
import sys

BYTE_OFFSET = 3
BYTE_PAD, BYTE_BOS, BYTE_EOS = 0, 1, 2

ROLE_NAMES = {
    "system": "system",
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant", "model": "assistant",
}


def open_text(path):
    return gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")


def read_records(path):
    with open_text(path) as f:
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
        rest = f.read()
    text = head + rest
    if head == "[":
        data = json.loads(text)
        for i, rec in enumerate(data):
            yield f"{path}: array index {i}", rec
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                yield f"{path}: line {n}", json.loads(line)


def content_text(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def to_messages(rec, where):
    """Returns [{"role", "content"}] or raises ValueError naming the record."""
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: a record is not a JSON object")
    if "conversations" in rec:
        turns, role_key, text_key = rec["conversations"], "from", "value"
    elif "messages" in rec:
        turns, role_key, text_key = rec["messages"], "role", "content"
    elif "turns" in rec:
        turns = rec["turns"]
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
            raise ValueError(f"{where}: turns is not a list of strings")
        return [{"role": "user", "content": turns[0]}]
    elif "instruction" in rec and "output" in rec:
        prompt = rec["instruction"]
        if rec.get("input"):
            prompt += "\n\n" + rec["input"]
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": rec["output"]}]
    else:
        raise ValueError(f"{where}: unknown record format (expected conversations, messages or instruction/output)")
    out = []
    for t in turns:
        role = ROLE_NAMES.get(str(t.get(role_key, "")).lower())
        if role is None:
            raise ValueError(f"{where}: unknown role {t.get(role_key)!r}")
        out.append({"role": role, "content": content_text(t.get(text_key))})
    return out


class ByteLevel:
    vocab_size = 259

    def encode(self, text):
        return [b + BYTE_OFFSET for b in text.encode("utf-8")]

    bos_id, eos_id = BYTE_BOS, BYTE_EOS


class HFTokenizer:
    """A tokenizer.json (tokenizers package) or a folder (transformers, for its chat template)."""

    def __init__(self, path):
        self.template_tok = None
        config = {}
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        cfg_path = os.path.join(folder, "tokenizer_config.json")
        if os.path.isdir(path) and os.path.exists(cfg_path):
            with open(cfg_path, encoding="utf-8") as f:
                config = json.load(f)
        tok_file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        if os.path.isdir(path) and config.get("chat_template") is not None or (
                os.path.isdir(path) and os.path.exists(os.path.join(path, "chat_template.jinja"))):
            from transformers import AutoTokenizer
            self.template_tok = AutoTokenizer.from_pretrained(path)
            if not self.template_tok.is_fast:
                sys.exit(f"{path}: the chat-template path needs a fast tokenizer (tokenizer.json)")
        from tokenizers import Tokenizer
        self.tok = Tokenizer.from_file(tok_file)
        self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)

        def token_id(value, fallbacks):
            if isinstance(value, dict):
                value = value.get("content")
            for name in ([value] if value else []) + fallbacks:
                i = self.tok.token_to_id(name)
                if i is not None:
                    return i
            return None

        self.bos_id = token_id(config.get("bos_token"), []) if config.get("bos_token") else None
        self.eos_id = token_id(config.get("eos_token"),
                               ["</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "<|im_end|>", "<|eot_id|>"])

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids


def simple_template(tok, messages):
    ids, mask = [], []

    def add(seg_ids, m):
        ids.extend(seg_ids)
        mask.extend([m] * len(seg_ids))

    if tok.bos_id is not None:
        add([tok.bos_id], 0)
    for msg in messages:
        if msg["role"] == "assistant":
            add(tok.encode("Assistant: "), 0)
            add(tok.encode(msg["content"]), 1)
            if tok.eos_id is not None:
                add([tok.eos_id], 1)
        else:
            label = "System" if msg["role"] == "system" else "User"
            add(tok.encode(f"{label}: {msg['content']}\n\n"), 0)
    return ids, mask


def category_of(rec, where):
    """The record's category ("": none); a category that is not a string is refused."""
    c = rec.get("category") if isinstance(rec, dict) else None
    if c is None:
        return ""
    if not isinstance(c, str) or len(c.encode("utf-8")) > 256:
        raise ValueError(f"{where}: category is not a string of at most 256 bytes: {c!r}")
    return c


def prompt_sample(tok, messages, use_chat):
    """The turns before the first reply with the generation prompt, then one trained eos token."""
    k = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    prompt = messages[:k]
    if tok.eos_id is None:
        sys.exit("--prompts needs an end-of-sequence token to mark where the reply starts")
    if use_chat:
        t = tok.template_tok
        text = t.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        ids = list(t(text, add_special_tokens=False)["input_ids"])
    else:
        ids, _ = simple_template(tok, prompt)
        ids += tok.encode("Assistant: ")
    return ids + [tok.eos_id], [0] * len(ids) + [1]


def chat_template(tok, messages):
    """Renders with the tokenizer's chat template; assistant spans are found from rendered prefixes."""
    t = tok.template_tok
    text = t.apply_chat_template(messages, tokenize=False)
    spans = []
    for k, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        before = t.apply_chat_template(messages[:k], tokenize=False, add_generation_prompt=True) if k else ""
        upto = t.apply_chat_template(messages[:k + 1], tokenize=False)
        if text.startswith(upto) and upto.startswith(before):
            spans.append((len(before), len(upto)))
        else:  # templates that rewrite earlier turns: fall back to the reply's own text
            start = text.find(msg["content"], spans[-1][1] if spans else 0)
            if start >= 0:
                spans.append((start, start + len(msg["content"])))
    enc = t(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, mask = list(enc["input_ids"]), []
    # A token is trained when its characters overlap a reply: with byte-level BPE the first reply
    # token often starts with the space that ends the generation prompt (" No").
    for (a, b) in enc["offset_mapping"]:
        mask.append(1 if any((a < e and b > s) if b > a else s <= a < e for s, e in spans) else 0)
    return ids, mask


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="conversation files (.json, .jsonl, optionally .gz)")
    ap.add_argument("-o", "--output", required=True, help="the JSONL file to write")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--tokenizer", help="Hugging Face tokenizer folder or tokenizer.json")
    g.add_argument("--byte-level", action="store_true", help="UTF-8 bytes + 3; no tokenizer needed")
    ap.add_argument("--no-chat-template", action="store_true", help="use the simple template even if a chat template exists")
    ap.add_argument("--max-samples", type=int, default=0, help="stop after this many samples; 0: all")
    ap.add_argument("--prompts", action="store_true",
                    help="write evaluation prompts (the turns before the first reply, then one trained eos)")
    args = ap.parse_args(argv)

    tok = ByteLevel() if args.byte_level else HFTokenizer(args.tokenizer)
    use_chat = getattr(tok, "template_tok", None) is not None and not args.no_chat_template
    tmp = args.output + ".tmp"
    written = skipped = tokens = trained = 0
    with open(tmp, "w", encoding="utf-8") as out:
        for path in args.inputs:
            for where, rec in read_records(path):
                messages = to_messages(rec, where)
                category = category_of(rec, where)
                if args.prompts:
                    ids, mask = prompt_sample(tok, messages, use_chat)
                else:
                    if not any(m["role"] == "assistant" and m["content"] for m in messages):
                        skipped += 1
                        continue
                    ids, mask = chat_template(tok, messages) if use_chat else simple_template(tok, messages)
                if not ids or not any(mask):
                    skipped += 1
                    continue
                sample = {"input_ids": ids, "loss_mask": mask}
                if category:
                    sample["category"] = category
                out.write(json.dumps(sample, separators=(",", ":")) + "\n")
                written += 1
                tokens += len(ids)
                trained += sum(mask)
                if args.max_samples and written >= args.max_samples:
                    break
            if args.max_samples and written >= args.max_samples:
                break
    os.replace(tmp, args.output)
    print(f"{args.output}: {written} samples, {tokens} tokens ({trained} trained), {skipped} skipped; "
          f"{'chat template' if use_chat else 'simple template'}, vocabulary {tok.vocab_size}", file=sys.stderr)


if __name__ == "__main__":
    main()
