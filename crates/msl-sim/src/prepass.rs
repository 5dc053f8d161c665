//! Source-to-source pass for what the `metal_stdlib` shim header cannot
//! express. Input: a `.metal` file after `clang++ -E -DMSL_PREPASS` (user
//! macros expanded, MSL keywords and `[[attributes]]` intact, line markers
//! kept). Output: C++ for the full shim, plus one entry point per kernel.
//!
//! 1. Kernels: `kernel void f(...)` definitions and
//!    `template [[host_name("n")]] kernel void f<T>(...);` instantiations
//!    each get an `extern "C" void msl_entry_<name>(const Invocation*)`
//!    that binds every parameter from its attribute (`[[buffer(i)]]`,
//!    `[[threadgroup(i)]]`, a position attribute) by the parameter's type,
//!    and a table `msl_binds_<name>` of (kind, index, referent size) that
//!    the dispatcher checks bindings against. `kernel` is then dropped.
//! 2. `[[...]]` attributes are dropped.
//! 3. A `threadgroup` object declaration becomes a reference into the
//!    runtime's per-threadgroup arena (`auto& v = msl_rt::tg_var<T[N]>()`);
//!    `threadgroup` before a pointer / reference declarator or in a cast is
//!    dropped.
//! 4. Half literals `1.5h` become `((half)1.5f)`.
//!
//! Line structure is preserved (replacements keep their newlines), so clang
//! diagnostics and `__LINE__` still point at the `.metal` lines.

use std::fmt::Write as _;

/// One kernel the library exports.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Host name (the MSL function name or its `[[host_name]]`).
    pub name: String,
    /// The C++ function expression to call (`f` or `f<float>`).
    callee: String,
    /// Parameters in order.
    params: Vec<Param>,
}

#[derive(Debug, Clone, PartialEq)]
struct Param {
    ty: String,
    bind: Bind,
}

#[derive(Debug, Clone, PartialEq)]
enum Bind {
    Buffer(u32),
    Threadgroup(u32),
    /// A field of `msl_rt::Pos`.
    Pos(&'static str),
}

/// Result of the pass: the rewritten source (entry points appended) and
/// the kernels found.
#[derive(Debug)]
pub struct Output {
    /// C++ source for the full shim.
    pub source: String,
    /// Kernels in source order.
    pub entries: Vec<Entry>,
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Byte offsets of `word` as a whole identifier.
fn find_words(src: &str, word: &str) -> Vec<usize> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = src[from..].find(word) {
        let at = from + i;
        let end = at + word.len();
        let before_ok = at == 0 || !is_ident(b[at - 1]);
        let after_ok = end >= b.len() || !is_ident(b[end]);
        if before_ok && after_ok {
            out.push(at);
        }
        from = end;
    }
    out
}

/// Index just past the bracket matching the one at `open`.
fn matching(src: &str, open: usize) -> Option<usize> {
    let b = src.as_bytes();
    let (o, c) = match b[open] {
        b'(' => (b'(', b')'),
        b'<' => (b'<', b'>'),
        b'[' => (b'[', b']'),
        b'{' => (b'{', b'}'),
        _ => return None,
    };
    let mut depth = 0usize;
    for (i, &ch) in b.iter().enumerate().skip(open) {
        if ch == o {
            depth += 1;
        } else if ch == c {
            depth -= 1;
            if depth == 0 {
                return Some(i + 1);
            }
        }
    }
    None
}

fn skip_ws(src: &str, mut i: usize) -> usize {
    let b = src.as_bytes();
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Split a parameter list on top-level commas.
fn split_params(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, ch) in list.char_indices() {
        match ch {
            '(' | '<' | '[' | '{' => depth += 1,
            ')' | '>' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(list[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = list[start..].trim();
    if !last.is_empty() {
        out.push(last.to_string());
    }
    out
}

/// Newlines in `s`, to keep the line structure of replaced text.
fn newlines(s: &str) -> String {
    "\n".repeat(s.matches('\n').count())
}

fn position_field(attr: &str) -> Option<&'static str> {
    Some(match attr {
        "threadgroup_position_in_grid" => "tgpig",
        "thread_position_in_threadgroup" => "tpitg",
        "thread_position_in_grid" => "tpig",
        "threads_per_threadgroup" => "tptg",
        "threadgroups_per_grid" => "tgpg",
        "threads_per_grid" => "tpg",
        "thread_index_in_threadgroup" => "tiitg",
        "simdgroup_index_in_threadgroup" => "sgitg",
        "thread_index_in_simdgroup" => "tiisg",
        "simdgroups_per_threadgroup" => "sgptg",
        "threads_per_simdgroup" | "thread_execution_width" => "tptsg",
        _ => return None,
    })
}

/// Parse one kernel parameter: `<type> <name> [[attr]]`.
fn parse_param(kernel: &str, p: &str) -> Result<Param, String> {
    let Some(a) = p.find("[[") else {
        return Err(format!(
            "kernel `{kernel}`: parameter `{p}` has no [[buffer(i)]] / [[threadgroup(i)]] / position attribute"
        ));
    };
    let close = p[a..]
        .find("]]")
        .map(|e| a + e)
        .ok_or_else(|| format!("kernel `{kernel}`: unterminated attribute in `{p}`"))?;
    let attr: String = p[a + 2..close].split_whitespace().collect();
    let decl = p[..a].trim_end();
    let name_start = decl
        .bytes()
        .rposition(|c| !is_ident(c))
        .map_or(0, |i| i + 1);
    let ty = decl[..name_start].trim().to_string();
    if ty.is_empty() {
        return Err(format!("kernel `{kernel}`: cannot read the type of `{p}`"));
    }
    let index = |prefix: &str| -> Option<u32> {
        attr.strip_prefix(prefix)?
            .strip_prefix('(')?
            .strip_suffix(')')?
            .parse()
            .ok()
    };
    let bind = if let Some(i) = index("buffer") {
        Bind::Buffer(i)
    } else if let Some(i) = index("threadgroup") {
        Bind::Threadgroup(i)
    } else if let Some(f) = position_field(&attr) {
        Bind::Pos(f)
    } else {
        return Err(format!(
            "kernel `{kernel}`: attribute [[{attr}]] of `{p}` is not supported by msl-sim"
        ));
    };
    Ok(Param { ty, bind })
}

fn parse_params(kernel: &str, list: &str) -> Result<Vec<Param>, String> {
    split_params(list)
        .iter()
        .map(|p| parse_param(kernel, p))
        .collect()
}

/// Line number (1-based, in the preprocessed text) of byte `at`, for messages.
fn line_of(src: &str, at: usize) -> usize {
    src[..at].matches('\n').count() + 1
}

/// `template [[host_name("n")]] kernel void f<T>(params);` → entries; the
/// statement is blanked (keeping its newlines).
fn host_name_instantiations(src: &mut String, entries: &mut Vec<Entry>) -> Result<(), String> {
    while let Some(h) = src.find("host_name") {
        let open = src[..h]
            .rfind("[[")
            .ok_or_else(|| format!("line {}: host_name outside [[ ]]", line_of(src, h)))?;
        let start = src[..open].trim_end();
        if !start.ends_with("template") {
            return Err(format!(
                "line {}: [[host_name]] is only supported on explicit template instantiations",
                line_of(src, h)
            ));
        }
        let start = start.len() - "template".len();
        let q1 = src[h..].find('"').map(|i| h + i + 1);
        let q2 = q1.and_then(|q| src[q..].find('"').map(|i| q + i));
        let (Some(q1), Some(q2)) = (q1, q2) else {
            return Err(format!(
                "line {}: host_name needs a string literal",
                line_of(src, h)
            ));
        };
        let name = src[q1..q2].to_string();
        let attr_end = src[q2..]
            .find("]]")
            .map(|i| q2 + i + 2)
            .ok_or_else(|| format!("line {}: unterminated [[host_name]]", line_of(src, h)))?;
        let semi = src[attr_end..]
            .find(';')
            .map(|i| attr_end + i)
            .ok_or_else(|| format!("line {}: instantiation without `;`", line_of(src, h)))?;
        let stmt = &src[attr_end..semi];
        let lt = stmt.find('<').ok_or_else(|| {
            format!(
                "line {}: `{name}` needs template arguments",
                line_of(src, h)
            )
        })?;
        let gt =
            matching(stmt, lt).ok_or_else(|| format!("line {}: unbalanced <>", line_of(src, h)))?;
        let head = stmt[..lt].trim_end();
        let fn_start = head
            .bytes()
            .rposition(|c| !is_ident(c))
            .map_or(0, |i| i + 1);
        let callee = format!("{}{}", &head[fn_start..], &stmt[lt..gt]);
        let po = stmt[gt..]
            .find('(')
            .map(|i| gt + i)
            .ok_or_else(|| format!("line {}: `{name}` has no parameter list", line_of(src, h)))?;
        let pc =
            matching(stmt, po).ok_or_else(|| format!("line {}: unbalanced ()", line_of(src, h)))?;
        let params = parse_params(&name, &stmt[po + 1..pc - 1])?;
        entries.push(Entry {
            name,
            callee,
            params,
        });
        let blank = newlines(&src[start..=semi]);
        src.replace_range(start..=semi, &blank);
    }
    Ok(())
}

/// `kernel` keywords: a non-template definition becomes an entry; the
/// keyword is dropped everywhere.
fn kernel_definitions(src: &mut String, entries: &mut Vec<Entry>) -> Result<(), String> {
    for at in find_words(src, "kernel").into_iter().rev() {
        let before = src[..at].trim_end();
        let templated = before.ends_with('>');
        let attr_form = before.ends_with("[[") || before.ends_with("[[ ");
        if attr_form {
            continue; // [[kernel]] attribute: dropped with the attributes
        }
        if !templated {
            let rest = &src[at + "kernel".len()..];
            let po = rest
                .find('(')
                .ok_or_else(|| format!("line {}: kernel without parameters", line_of(src, at)))?;
            let head = rest[..po].trim_end();
            let name_start = head
                .bytes()
                .rposition(|c| !is_ident(c))
                .map_or(0, |i| i + 1);
            let name = head[name_start..].to_string();
            let pc = matching(rest, po)
                .ok_or_else(|| format!("line {}: unbalanced ()", line_of(src, at)))?;
            let params = parse_params(&name, &rest[po + 1..pc - 1])?;
            let after = skip_ws(rest, pc);
            if rest.as_bytes().get(after) == Some(&b'{') {
                entries.push(Entry {
                    callee: name.clone(),
                    name,
                    params,
                });
            }
        }
        src.replace_range(at..at + "kernel".len(), "      ");
    }
    Ok(())
}

fn strip_attributes(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(a) = rest.find("[[") {
        out.push_str(&rest[..a]);
        match rest[a..].find("]]") {
            Some(e) => {
                out.push_str(&newlines(&rest[a..a + e + 2]));
                rest = &rest[a + e + 2..];
            }
            None => {
                rest = &rest[a..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Rewrite `threadgroup` declarations and drop the qualifier elsewhere.
fn threadgroup(src: &str) -> Result<String, String> {
    let mut out = String::with_capacity(src.len());
    let mut pos = 0;
    for at in find_words(src, "threadgroup") {
        if at < pos {
            continue; // inside a declaration already rewritten
        }
        out.push_str(&src[pos..at]);
        let body = at + "threadgroup".len();
        let stop = declarator_end(src, body);
        let tail = &src[body..stop];
        // `*`, `&`, `(` in the declarator (not in an array size such as
        // `[2 * (N + 1)]`) make it a pointer / reference or a cast
        let declarator = &tail[..tail.find('[').unwrap_or(tail.len())];
        let is_decl = src.as_bytes().get(stop) == Some(&b';')
            && !declarator.contains('*')
            && !declarator.contains('&')
            && !declarator.contains('(');
        if !is_decl {
            pos = body; // a pointer / reference qualifier or a cast: drop it
            continue;
        }
        let t = tail.trim();
        let dims_at = t.find('[').unwrap_or(t.len());
        let (decl, dims) = t.split_at(dims_at);
        let decl = decl.trim_end();
        let name_start = decl
            .bytes()
            .rposition(|c| !is_ident(c))
            .map_or(0, |i| i + 1);
        let (ty, name) = (decl[..name_start].trim(), &decl[name_start..]);
        if ty.is_empty() || name.is_empty() {
            return Err(format!(
                "line {}: cannot read the threadgroup declaration `threadgroup{tail}`",
                line_of(src, at)
            ));
        }
        let ty = ty.replace(['\n', '\r'], " ");
        let dims: String = dims.split_whitespace().collect();
        write!(
            out,
            "auto& {name} = ::msl_rt::tg_var<{ty}{dims}>(__LINE__){}",
            newlines(tail)
        )
        .ok();
        pos = stop;
    }
    out.push_str(&src[pos..]);
    Ok(out)
}

/// The byte index of the first `;`, `,`, `)`, `=` or `{` at or after `from`
/// outside `[...]` (array sizes may hold any of them), or `src.len()`.
fn declarator_end(src: &str, from: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in src[from..].bytes().enumerate() {
        match c {
            b'[' => depth += 1,
            b']' => depth = depth.saturating_sub(1),
            b';' | b',' | b')' | b'=' | b'{' if depth == 0 => return from + i,
            _ => {}
        }
    }
    src.len()
}

/// `1.5h` → `((half)1.5f)`; `2h` → `((half)2)`.
fn half_literals(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        let c = b[i];
        let starts = (c.is_ascii_digit()
            || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)))
            && (i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == b'.'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
            j += 1;
        }
        if j < b.len() && (b[j] == b'e' || b[j] == b'E') {
            let mut k = j + 1;
            if k < b.len() && (b[k] == b'+' || b[k] == b'-') {
                k += 1;
            }
            if k < b.len() && b[k].is_ascii_digit() {
                j = k;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
            }
        }
        let is_half = j < b.len()
            && (b[j] == b'h' || b[j] == b'H')
            && (j + 1 >= b.len() || !is_ident(b[j + 1]));
        if is_half {
            let num = &src[i..j];
            let f = if num.contains(['.', 'e', 'E']) {
                "f"
            } else {
                ""
            };
            out.push_str(&src[last..i]);
            write!(out, "((half){num}{f})").ok();
            last = j + 1;
            i = j + 1;
        } else {
            // skip the rest of this token (hex digits, suffixes)
            while j < b.len() && is_ident(b[j]) {
                j += 1;
            }
            i = j;
        }
    }
    out.push_str(&src[last..]);
    out
}

fn entry_code(e: &Entry) -> String {
    let mut args = Vec::new();
    let mut binds = String::new();
    for p in &e.params {
        let ty = &p.ty;
        match &p.bind {
            Bind::Buffer(i) => {
                args.push(format!("::msl_rt::bind::arg<{ty}>::ptr(inv->buffers[{i}])"));
                write!(binds, "1,{i},::msl_rt::bind::arg<{ty}>::ref_size,").ok();
            }
            Bind::Threadgroup(i) => {
                args.push(format!("::msl_rt::bind::arg<{ty}>::ptr(inv->tgmem[{i}])"));
                write!(binds, "2,{i},0,").ok();
            }
            Bind::Pos(f) => args.push(format!("::msl_rt::bind::arg<{ty}>::pos(inv->pos->{f})")),
        }
    }
    format!(
        "extern \"C\" void msl_entry_{n}(const ::msl_rt::Invocation* inv) {{ {c}({a}); }}\n\
         extern \"C\" const unsigned long msl_binds_{n}[] = {{{binds}0}};\n",
        n = e.name,
        c = e.callee,
        a = args.join(", "),
    )
}

/// Run the pass over preprocessed source.
pub fn rewrite(pre: &str) -> Result<Output, String> {
    let mut src = pre.to_string();
    let mut entries = Vec::new();
    host_name_instantiations(&mut src, &mut entries)?;
    let mut defs = Vec::new();
    kernel_definitions(&mut src, &mut defs)?;
    defs.reverse();
    entries.extend(defs);
    for e in &entries {
        if !e.name.bytes().all(is_ident) || e.name.is_empty() {
            return Err(format!("kernel name `{}` is not an identifier", e.name));
        }
    }
    let src = strip_attributes(&src);
    let src = threadgroup(&src)?;
    let mut src = half_literals(&src);
    src.insert_str(0, "#include <metal_stdlib>\n");
    src.push_str(
        "\n// ---- entry points generated by msl-sim ----\n#line 1 \"<msl-sim entry points>\"\n",
    );
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    for e in &entries {
        src.push_str(&entry_code(e));
    }
    writeln!(
        src,
        "extern \"C\" const char msl_kernel_names[] = \"{}\";",
        names.join(",")
    )
    .ok();
    Ok(Output {
        source: src,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threadgroup_declarations_and_pointers() {
        let s = threadgroup(
            "{ threadgroup float part[32];\n threadgroup float* p = (threadgroup float*)q; }",
        )
        .unwrap();
        assert!(
            s.contains("auto& part = ::msl_rt::tg_var<float[32]>(__LINE__);"),
            "{s}"
        );
        assert!(s.contains(" float* p = ( float*)q;"), "{s}");
        assert!(!s.contains("threadgroup "), "{s}");
    }

    #[test]
    fn threadgroup_array_sizes_are_expressions() {
        // `*`, `(`, `)` and `,` inside the size belong to the size: still a
        // per-threadgroup array, not a pointer or a cast
        let s = threadgroup(
            "{ threadgroup float tile[2 * (T + 1)][max(T, 4u)];\n threadgroup half* h = (threadgroup half*)tile; }",
        )
        .unwrap();
        assert!(
            s.contains("auto& tile = ::msl_rt::tg_var<float[2*(T+1)][max(T,4u)]>(__LINE__);"),
            "{s}"
        );
        assert!(s.contains(" half* h = ( half*)tile;"), "{s}");
    }

    #[test]
    fn half_literals_only_touch_numbers() {
        assert_eq!(
            half_literals("x = 1.5h + 2h + a2h + 0x1h;"),
            "x = ((half)1.5f) + ((half)2) + a2h + 0x1h;"
        );
        assert_eq!(half_literals("y = 1e-3h;"), "y = ((half)1e-3f);");
    }

    #[test]
    fn kernels_and_instantiations_become_entries() {
        let src = "template <typename T>\nkernel void f(device T* x [[buffer(1)]], uint i [[thread_position_in_grid]]) { }\n\
                   template [[host_name(\"f_f32\")]] kernel void f<float>(device float* x [[buffer(1)]], uint i [[thread_position_in_grid]]);\n\
                   kernel void g(constant uint& n [[buffer(0)]], threadgroup float* s [[threadgroup(0)]]) { }\n";
        let out = rewrite(src).unwrap();
        let names: Vec<_> = out.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["f_f32", "g"]);
        assert_eq!(out.entries[0].callee, "f<float>");
        assert_eq!(out.entries[1].params[1].bind, Bind::Threadgroup(0));
        // line structure kept: same number of lines before the entry block
        let body = out.source.split("// ---- entry").next().unwrap();
        assert_eq!(body.matches('\n').count(), src.matches('\n').count() + 2);
        assert!(!body.contains("kernel"), "{body}");
    }

    #[test]
    fn unsupported_attribute_is_named() {
        let e = rewrite("kernel void k(texture2d<float> t [[texture(0)]]) {}").unwrap_err();
        assert!(e.contains("[[texture(0)]]") && e.contains("`k`"), "{e}");
    }
}
