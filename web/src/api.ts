/**
 * The RunnerService client of the page: the generated service descriptor over Connect-Web
 * (binary protobuf, HTTP/1.1 fetch streaming) to the server that served the page.
 */
import { Code, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { RunnerError, RunnerService } from "./proto.js";

export type RunnerClient = Client<typeof RunnerService>;

const TOKEN_KEY = "helix-runner-token";

/** The bearer token for servers that require one (kept for this browser tab only). */
export function getToken(): string {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

export function setToken(token: string): void {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

const auth: Interceptor = (next) => (req) => {
  const token = getToken();
  if (token) req.header.set("authorization", `Bearer ${token}`);
  return next(req);
};

export const client: RunnerClient = createClient(
  RunnerService,
  createConnectTransport({ baseUrl: location.origin, useBinaryFormat: true, interceptors: [auth] }),
);

/** A call's error as one line for a person: code, message and the ErrorInfo reason. */
export function describeError(error: unknown): string {
  const e = RunnerError.from(error);
  return `${Code[e.code] ?? e.code}: ${e.rawMessage}${e.reason ? ` [${e.reason}]` : ""}`;
}

export function isUnauthenticated(error: unknown): boolean {
  return RunnerError.from(error).code === Code.Unauthenticated;
}

export function isAbort(error: unknown): boolean {
  return RunnerError.from(error).code === Code.Canceled;
}
