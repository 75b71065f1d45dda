"""How environment text becomes tokens: the usage instructions put into a prompt, and the replies put
after a policy turn. Built once per run (`TurnFormat`), shared by every episode's environment.

Everything here makes token ids for the environment's own text; the policy's tokens are never decoded
and encoded again (rlx.envs.driver appends them as sampled).

- `reply_format=inline`: a reply is its text's tokens, right after the policy's (`...<calc>3*4</calc>`
  then `<result>12</result>`, the policy going on in the same message). Works with any tokenizer.
- `reply_format=chat`: a reply is a message of role `chat_role` in the model's chat template: the
  tokens that close the assistant's message, the reply's message, and the header of the next assistant
  message, read off the template itself (a sentinel assistant message, the text after it).

Instructions go inside the user's message of a chat prompt (before the template's closing tail, read
off the template the same way), else at the end of the prompt.
"""

from __future__ import annotations

_SENTINEL = "\u2063rlx-sentinel\u2063"  # text no prompt or reply holds


def _template_tail(tok, messages: list[dict]) -> str:
    """What the chat template writes after the sentinel content of the last message of `messages`,
    generation prompt included."""
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    if text.count(_SENTINEL) != 1:
        raise ValueError("the model's chat template does not render message contents verbatim")
    return text.split(_SENTINEL)[1]


class TurnFormat:
    """Token ids of environment text for one tokenizer: `instruct(prompt_ids, text)`, `reply(text)`."""

    def __init__(self, tok, reply_format: str = "inline", chat_role: str = "tool"):
        self.tok, self.reply_format, self.chat_role = tok, reply_format, chat_role
        self.user_tail: list[int] = []  # tokens a chat prompt ends with after the user's text
        self._around: tuple[str, str] | None = None  # chat replies: (before, after) the reply's text
        if getattr(tok, "chat_template", None):
            try:
                self.user_tail = self.ids(_template_tail(tok, [{"role": "user", "content": _SENTINEL}]))
            except Exception:  # noqa: BLE001  (a template that needs more than one user message: instructions go last)
                self.user_tail = []
        if reply_format == "chat":
            if not getattr(tok, "chat_template", None):
                raise ValueError("env.reply_format=chat needs a model with a chat template (model.chat_template, "
                                 "or a model that ships one); use env.reply_format=inline")
            messages = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": _SENTINEL},
                        {"role": chat_role, "content": _SENTINEL}]
            # both contents the sentinel: [user ...] SENT [assistant close, reply header] SENT [reply close, next header]
            try:
                text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            except Exception as e:  # a template that refuses the role
                raise ValueError(f"env.chat_role={chat_role!r}: the model's chat template cannot render a message "
                                 f"of that role after the assistant's ({type(e).__name__}: {e})") from e
            if text.count(_SENTINEL) != 2:
                raise ValueError(f"env.chat_role={chat_role!r}: the model's chat template drops or rewrites the "
                                 f"assistant's or the {chat_role}'s message")
            _, before, after = text.split(_SENTINEL)
            self._around = (before, after)

    def ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False).input_ids

    def instruct(self, prompt_ids: list[int], text: str) -> list[int]:
        """`prompt_ids` with the instruction text inside the user's message (a chat prompt) or after it."""
        if not text:
            return list(prompt_ids)
        add = self.ids("\n" + text)
        k = len(self.user_tail)
        if k and list(prompt_ids[-k:]) == self.user_tail:
            return list(prompt_ids[:-k]) + add + self.user_tail
        return list(prompt_ids) + add

    def reply(self, text: str, after_eos: bool = False) -> list[int]:
        """The token ids of one environment reply after a policy turn (`after_eos`: that turn ended with
        eos, which already closed the assistant's message in a chat template that closes with eos)."""
        if self._around is None:
            return self.ids(text)
        before, after = self._around
        ids = self.ids(before + text + after)
        return ids[1:] if after_eos and ids and ids[0] == self.tok.eos_token_id else ids
