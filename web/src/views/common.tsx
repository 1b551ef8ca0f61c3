/** Pieces every view uses: the error banner and the token prompt. */
import { useState } from "preact/hooks";
import { getToken, setToken } from "../api.js";
import type { Polled } from "../util.js";

export function Problem({ polled, error }: { polled?: Polled<unknown>; error?: string }) {
  const message = error ?? polled?.error;
  if (!message) return null;
  return (
    <div class="problem" role="alert" data-testid="problem">
      {message}
      {polled?.unauthenticated && <TokenPrompt />}
    </div>
  );
}

/** The server requires a bearer token (`--auth-token-file`): ask for it once per tab. */
export function TokenPrompt() {
  const [value, setValue] = useState(getToken());
  return (
    <form
      class="token"
      onSubmit={(e) => {
        e.preventDefault();
        setToken(value.trim());
        location.reload();
      }}
    >
      <label>
        Bearer token <input type="password" value={value} onInput={(e) => setValue(e.currentTarget.value)} autoComplete="off" />
      </label>
      <button type="submit">Use token</button>
    </form>
  );
}
