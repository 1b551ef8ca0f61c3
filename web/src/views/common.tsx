/** Pieces every view uses: the error banner, the token prompt, and who is signed in. */
import { useState } from "preact/hooks";
import { client, getToken, setToken } from "../api.js";
import { usePoll, type Polled } from "../util.js";

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

/**
 * In the header when the server answers the model API itself (offline mode): every dollar figure on
 * the page is what the same tokens would cost, and nothing is billed (ServerStatus.offline).
 */
export function OfflineNote() {
  const status = usePoll((signal) => client.getServerStatus({}, { signal }), [], 60000);
  if (!status.data?.status?.offline) return null;
  return (
    <span class="offline" data-testid="offline" title="The server answers the model API itself (offline_script)">
      offline: costs are what the same tokens would cost; nothing is billed
    </span>
  );
}

/**
 * The header's corner: who the server takes this tab for (WhoAmI) with "Sign out" when a token is
 * in use, or "Sign in" (the token prompt) when there is none or it was refused.
 */
export function WhoAmI() {
  const [asking, setAsking] = useState(false);
  const me = usePoll((signal) => client.whoAmI({}, { signal }), [], 30000);
  const signedIn = getToken() !== "";
  const name = me.data?.principal?.name;
  return (
    <div class="whoami" data-testid="whoami">
      {name && <span title={(me.data?.principal?.grants ?? []).map((g) => `${g.projectId}: ${g.roles.join(", ")}`).join("\n")}>{name}</span>}
      {signedIn ? (
        <button type="button" onClick={() => { setToken(""); location.reload(); }}>Sign out</button>
      ) : (
        <button type="button" onClick={() => setAsking(!asking)}>Sign in</button>
      )}
      {(asking || me.unauthenticated) && <TokenPrompt />}
    </div>
  );
}
