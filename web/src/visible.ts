// What a phase wrote, made visible and inert before the page shows it (issue 30.5). The browser
// obeys no terminal escape, but it does obey Unicode bidi controls, and zero-width characters hide
// text: a held call could read as something else to the person deciding it (Trojan Source,
// CVE-2021-42574). Each such character is shown as its escape (`\u202e`), as the CLI shows it
// (server/helix_runner/cli/visible.py, the same table); tests/fixtures/visible/cases.json holds the
// cases both must agree on (web/test/visible.test.ts, tests/cli/test_cli_visible.py).

// [first, last] code points always escaped: C0 but tab and newline, DEL, C1, and the format
// characters that draw nothing (see visible.py for the list and why each is there).
export const UNSAFE_RANGES: ReadonlyArray<readonly [number, number]> = [
  [0x00, 0x08], [0x0b, 0x1f], [0x7f, 0x9f], [0xad, 0xad], [0x034f, 0x034f], [0x061c, 0x061c],
  [0x115f, 0x1160], [0x180e, 0x180e], [0x200b, 0x200b], [0x200e, 0x200f], [0x2028, 0x202e],
  [0x2060, 0x2064], [0x2066, 0x206f], [0x3164, 0x3164], [0xd800, 0xdfff], [0xfeff, 0xfeff],
  [0xffa0, 0xffa0], [0xfff9, 0xfffb], [0x13430, 0x1343f], [0x1bca0, 0x1bca3], [0x1d173, 0x1d17a],
  [0xe0001, 0xe0001], [0xe0020, 0xe007f],
];
const JOINERS = "\u200c\u200d";

function unsafe(cp: number): boolean {
  return UNSAFE_RANGES.some(([a, b]) => a <= cp && cp <= b);
}

function isAscii(ch: string): boolean {
  return (ch.codePointAt(0) ?? 0) < 0x80;
}

export function escapeChar(ch: string): string {
  const cp = ch.codePointAt(0) ?? 0;
  if (cp <= 0xff) return `\\x${cp.toString(16).padStart(2, "0")}`;
  if (cp <= 0xffff) return `\\u${cp.toString(16).padStart(4, "0")}`;
  return `\\U${cp.toString(16).padStart(8, "0")}`;
}

// The characters of `text` (code points; a lone surrogate is one) with whether each is escaped.
function pieces(text: string): Array<[string, boolean]> {
  const chars = Array.from(text);
  const out: Array<[string, boolean]> = [];
  for (let i = 0; i < chars.length; i++) {
    const ch = chars[i];
    const cp = ch.codePointAt(0) ?? 0;
    if (cp === 0x1f3f4) {  // a subdivision flag: black flag, tags, cancel tag, kept whole
      let j = i + 1;
      while (j < chars.length && (chars[j].codePointAt(0) ?? 0) >= 0xe0020 && (chars[j].codePointAt(0) ?? 0) <= 0xe007e) j++;
      if (j > i + 1 && j < chars.length && chars[j].codePointAt(0) === 0xe007f) {
        out.push([chars.slice(i, j + 1).join(""), false]);
        i = j;
        continue;
      }
    }
    if (JOINERS.includes(ch)) {  // kept between two visible non-ASCII characters (scripts, emoji)
      const before = chars[i - 1], after = chars[i + 1];
      const kept = before !== undefined && after !== undefined && !isAscii(before) && !isAscii(after)
        && !unsafe(before.codePointAt(0) ?? 0) && !unsafe(after.codePointAt(0) ?? 0)
        && !JOINERS.includes(before) && !JOINERS.includes(after);
      out.push([ch, !kept]);
      continue;
    }
    out.push([ch, unsafe(cp)]);
  }
  return out;
}

const ANY = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u034f\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164\ud800-\udfff\ufeff\uffa0\ufff9-\ufffb]|\udb40[\udc01\udc20-\udc7f]|\ud80d[\udc30-\udc3f]|\ud82f[\udca0-\udca3]|\ud834[\udd73-\udd7a]/;

/** `text` with every character a terminal or a bidi algorithm would obey or hide shown as its escape. */
export function visible(text: string): string {
  if (!text || !ANY.test(text)) return text;
  return pieces(text).map(([piece, escaped]) => (escaped ? escapeChar(piece) : piece)).join("");
}

/** JSON text with those characters written as JSON escapes: the same value, nothing to obey. */
export function escapedJson(text: string): string {
  if (!text || !ANY.test(text)) return text;
  return pieces(text).map(([piece, escaped]) => {
    if (!escaped) return piece;
    let out = "";
    for (let k = 0; k < piece.length; k++) out += `\\u${piece.charCodeAt(k).toString(16).padStart(4, "0")}`;
    return out;
  }).join("");
}
