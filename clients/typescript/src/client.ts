import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { RunnerService } from "./gen/helix/runner/v1/runner_service_pb.js";

/**
 * The generated RunnerService client: a promise-returning method per unary RPC and an async
 * iterable per stream; every method takes call options (`{ timeoutMs, signal, headers }`).
 */
export type RunnerClient = Client<typeof RunnerService>;

export interface RunnerClientOptions {
  /** `host:port` or a full `http://host:port` URL. */
  address: string;
  /**
   * Sent as `authorization: Bearer <token>` with every call, when the server requires it. A function
   * is asked before each call (short-lived tokens: return the current one, refreshing it as needed).
   */
  token?: string | (() => string | Promise<string>);
}

/** A gRPC (HTTP/2) transport to the runner. */
export function createRunnerTransport(options: RunnerClientOptions): Transport {
  const baseUrl = options.address.includes("://") ? options.address : `http://${options.address}`;
  const interceptors: Interceptor[] = [];
  const token = options.token;
  if (typeof token === "function") {
    interceptors.push((next) => async (req) => {
      const current = await token();
      if (current) req.header.set("authorization", `Bearer ${current}`);
      return next(req);
    });
  } else if (token) {
    const value = `Bearer ${token}`;
    interceptors.push((next) => (req) => {
      req.header.set("authorization", value);
      return next(req);
    });
  }
  return createGrpcTransport({ baseUrl, interceptors });
}

/** A RunnerService client over a gRPC transport. */
export function createRunnerClient(options: RunnerClientOptions | Transport): RunnerClient {
  const transport = "address" in options ? createRunnerTransport(options) : options;
  return createClient(RunnerService, transport);
}
