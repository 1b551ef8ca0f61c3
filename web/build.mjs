// Builds the dashboard with esbuild (no other build tool):
//   node build.mjs           the page into ../server/helix_runner/api/web_assets/ (committed; the
//                            server serves it, so a machine without node runs the dashboard)
//   node build.mjs --tests   test/*.test.ts into .test-build/*.test.mjs for `node --test`
// Deterministic: the same sources and lockfile give byte-identical files (scripts/test checks).
import * as esbuild from "esbuild";
import { copyFile, mkdir, readdir, rm } from "node:fs/promises";
import { dirname, join, sep } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const assets = join(here, "..", "server", "helix_runner", "api", "web_assets");

// The generated code under clients/typescript/src imports @bufbuild/protobuf and
// @connectrpc/connect, which would resolve to clients/typescript/node_modules: resolve them from
// here instead, so the bundle holds one copy of each (ConnectError and Code must be one class).
const oneCopy = {
  name: "one-copy",
  setup(build) {
    build.onResolve({ filter: /^@(bufbuild\/protobuf|connectrpc\/connect)(\/.*)?$/ }, (args) => {
      if (args.pluginData === "one-copy" || args.resolveDir.startsWith(here + sep)) return undefined;
      return build.resolve(args.path, { kind: args.kind, resolveDir: here, pluginData: "one-copy" });
    });
  },
};

const common = {
  bundle: true,
  format: "esm",
  target: "es2022",
  jsx: "automatic",
  jsxImportSource: "preact",
  plugins: [oneCopy],
  logLevel: "warning",
};

if (process.argv.includes("--tests")) {
  const tests = (await readdir(join(here, "test"))).filter((f) => f.endsWith(".test.ts"));
  await rm(join(here, ".test-build"), { recursive: true, force: true });
  await esbuild.build({
    ...common,
    platform: "node",
    entryPoints: tests.map((f) => join(here, "test", f)),
    outdir: join(here, ".test-build"),
    outExtension: { ".js": ".mjs" },
  });
} else {
  await rm(assets, { recursive: true, force: true });
  await mkdir(assets, { recursive: true });
  await esbuild.build({
    ...common,
    platform: "browser",
    entryPoints: { app: join(here, "src", "main.tsx") },
    outdir: assets,
    minify: true,
    legalComments: "eof",
    define: { "process.env.NODE_ENV": '"production"' },
  });
  await copyFile(join(here, "src", "index.html"), join(assets, "index.html"));
}
