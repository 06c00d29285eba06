//! The guard's reading of a POSIX shell script: simple commands as argv
//! vectors, with their redirections and what they read on standard input.
//!
//! The guard judges what a shell would run, so it has to split words as a
//! shell does: a pattern over the raw text reads `if true; then rm -rf /;
//! fi` as a program named `then`, and `{rm,-rf,/}` as one word. This is a
//! small tokenizer, not a shell: quotes (`'…'`, `"…"`, `$'…'`), escapes,
//! separators (`;`, `&&`, `||`, `|`, `&`, newline), subshells and groups,
//! keywords, redirections with their targets, here-documents and
//! here-strings, one level of brace expansion, and `$(…)` read recursively
//! as commands of their own. It never fails: text it cannot make sense of
//! becomes words, which the rules then judge (a stray word is a harmless
//! program name, never a hidden one).

/// How deep `$(…)` and `<(…)` may nest before the reading stops and the
/// script is marked [`Script::too_deep`] (so the guard fails closed).
const MAX_NESTING: usize = 8;

/// How many words one brace expansion may make (`{a,b}{c,d}` makes 4);
/// past it the word is kept as written.
const MAX_BRACE_WORDS: usize = 64;

/// The longest word whose braces are expanded: finding a brace's partner
/// scans the word, so this bounds the work (a program name is short).
const MAX_BRACE_WORD: usize = 4096;

/// Stand-ins for unquoted `{`, `,` and `}` inside a word, so brace
/// expansion sees only the ones a shell would expand (`'{a,b}'` stays one
/// word). Literal ones in the input are replaced before reading.
const OPEN: char = '\u{E000}';
const COMMA: char = '\u{E001}';
const CLOSE: char = '\u{E002}';

/// One simple command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Command {
    /// The words, assignments first, keywords dropped, braces expanded.
    pub words: Vec<String>,
    /// Files it writes (`>`, `>>`, `>|`, `&>`, `<>` and their fd forms).
    pub writes: Vec<String>,
    /// Text it reads on standard input: here-documents and here-strings.
    pub input: Vec<String>,
    /// Its standard input is the previous command's output (`a | b`).
    pub piped: bool,
}

/// A script read into commands.
#[derive(Debug, Default)]
pub(super) struct Script {
    /// Every simple command, those inside `$(…)`, `<(…)` and subshells
    /// included, in reading order.
    pub commands: Vec<Command>,
    /// Backtick substitutions and `$(…)` in unquoted here-documents:
    /// scripts the guard reads on their own.
    pub scripts: Vec<String>,
    /// `$(…)` nested deeper than [`MAX_NESTING`]: not read to its end.
    pub too_deep: bool,
}

/// Reads `script` as a shell would split it.
pub(super) fn parse(script: &str) -> Script {
    let chars: Vec<char> = script
        .chars()
        .map(|c| {
            if matches!(c, OPEN | COMMA | CLOSE) {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect();
    let mut parser = Parser {
        chars,
        i: 0,
        nesting: 0,
        heredocs: Vec::new(),
        out: Script::default(),
    };
    parser.list(false);
    parser.out
}

/// The words of the first command of `text` (`env -S 'rm -rf'`, a git
/// alias's value).
pub(super) fn words(text: &str) -> Vec<String> {
    parse(text)
        .commands
        .into_iter()
        .next()
        .map(|c| c.words)
        .unwrap_or_default()
}

/// A word being read: its text, and whether any of it was quoted (a quoted
/// `if` is a program, not a keyword; a quoted `2` before `>` is a word).
#[derive(Default)]
struct Word {
    text: String,
    quoted: bool,
    started: bool,
}

/// A here-document waiting for its body, which starts after the next
/// newline.
struct Heredoc {
    /// The command that reads it.
    command: usize,
    delimiter: String,
    /// `<<-`: leading tabs are stripped from its lines.
    strip_tabs: bool,
    /// An unquoted delimiter: `$(…)` in the body runs.
    expands: bool,
}

/// A command being read.
#[derive(Default)]
struct Pending {
    words: Vec<Word>,
    writes: Vec<String>,
    input: Vec<String>,
    heredocs: Vec<(String, bool, bool)>,
    piped: bool,
}

struct Parser {
    chars: Vec<char>,
    i: usize,
    nesting: usize,
    heredocs: Vec<Heredoc>,
    out: Script,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.i + ahead).copied()
    }

    fn text(&self, from: usize, to: usize) -> String {
        self.chars[from.min(to)..to].iter().collect()
    }

    /// Reads commands up to the end, or (`in_subst`) up to the `)` that
    /// closes a `$(`, which it consumes.
    fn list(&mut self, in_subst: bool) {
        let mut cmd = Pending::default();
        // Subshells opened inside a `$(`: their `)` does not close it.
        let mut parens = 0usize;
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.i += 1,
                '\n' => {
                    self.i += 1;
                    self.finish(&mut cmd, false);
                    self.heredoc_bodies();
                }
                ')' if in_subst && parens == 0 => {
                    self.i += 1;
                    self.finish(&mut cmd, false);
                    return;
                }
                '#' => self.skip_comment(),
                '&' if self.peek_at(1) == Some('>') => self.redirect(&mut cmd),
                '|' => {
                    let or = self.peek_at(1) == Some('|');
                    self.i += if or || self.peek_at(1) == Some('&') {
                        2
                    } else {
                        1
                    };
                    self.finish(&mut cmd, !or);
                }
                ';' | '&' | '(' | ')' => {
                    match c {
                        '(' => parens += 1,
                        ')' => parens = parens.saturating_sub(1),
                        _ => {}
                    }
                    self.i += 1;
                    self.finish(&mut cmd, false);
                }
                '<' | '>' => self.redirect(&mut cmd),
                _ => {
                    let word = self.word();
                    let is_fd = !word.quoted
                        && !word.text.is_empty()
                        && word.text.chars().all(|c| c.is_ascii_digit())
                        && matches!(self.peek(), Some('<' | '>'));
                    if !is_fd && word.started {
                        cmd.words.push(word);
                    }
                }
            }
            if self.out.too_deep {
                return;
            }
        }
        self.finish(&mut cmd, false);
        // A here-document left open runs to the end of the script.
        self.heredoc_bodies();
    }

    fn skip_comment(&mut self) {
        while self.peek().is_some_and(|c| c != '\n') {
            self.i += 1;
        }
    }

    /// Ends the command being read; `piped`: the next one reads its output.
    fn finish(&mut self, cmd: &mut Pending, piped: bool) {
        let done = std::mem::take(cmd);
        cmd.piped = piped;
        let words = command_words(done.words);
        // A keyword alone (`fi`, `done`, `}`) is no command.
        if words.is_empty()
            && done.writes.is_empty()
            && done.input.is_empty()
            && done.heredocs.is_empty()
        {
            return;
        }
        let index = self.out.commands.len();
        for (delimiter, strip_tabs, expands) in done.heredocs {
            self.heredocs.push(Heredoc {
                command: index,
                delimiter,
                strip_tabs,
                expands,
            });
        }
        self.out.commands.push(Command {
            words,
            writes: done.writes,
            input: done.input,
            piped: done.piped,
        });
    }

    /// Reads the bodies of the here-documents opened on the line just
    /// ended, in order.
    fn heredoc_bodies(&mut self) {
        for doc in std::mem::take(&mut self.heredocs) {
            let mut body = String::new();
            while self.i < self.chars.len() {
                let start = self.i;
                while self.peek().is_some_and(|c| c != '\n') {
                    self.i += 1;
                }
                let line = self.text(start, self.i);
                self.i = (self.i + 1).min(self.chars.len());
                let line = if doc.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    &line
                };
                if line == doc.delimiter {
                    break;
                }
                body.push_str(line);
                body.push('\n');
            }
            if doc.expands {
                self.out.scripts.extend(substitutions_in(&body));
            }
            if let Some(cmd) = self.out.commands.get_mut(doc.command) {
                cmd.input.push(body);
            }
        }
    }

    /// A redirection at `self.i` (`<`, `>`, `&>`, `<<`, `<<<`, …) and its
    /// target; `<(…)` and `>(…)` are read as commands.
    fn redirect(&mut self, cmd: &mut Pending) {
        let start = self.i;
        let mut op = String::new();
        while let Some(c) = self.peek() {
            let more = match c {
                '<' | '>' => op.len() < 3,
                '&' | '|' => !op.is_empty() || c == '&',
                '-' => op == "<<",
                _ => false,
            };
            if !more {
                break;
            }
            op.push(c);
            self.i += 1;
        }
        if (op == "<" || op == ">") && self.peek() == Some('(') {
            self.i += 1;
            self.substitution();
            return;
        }
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.i += 1;
        }
        // `>&2`, `2>&1`, `<&-`: a descriptor, not a file.
        let target = self.word();
        if !target.started && self.i == start {
            self.i += 1;
        }
        match op.as_str() {
            "<<" | "<<-" => cmd
                .heredocs
                .push((target.text, op == "<<-", !target.quoted)),
            "<<<" => cmd.input.push(target.text),
            "<" | "<&" => {}
            // `>&2`, `2>&1`, `>&-` duplicate a descriptor; `>&file` writes.
            ">&" if target.text.chars().all(|c| c.is_ascii_digit() || c == '-') => {}
            _ if op.starts_with('<') && !op.contains('>') => {}
            _ => cmd.writes.push(target.text),
        }
    }

    /// Reads one word at `self.i`, up to an unquoted blank or operator.
    fn word(&mut self) -> Word {
        let mut w = Word::default();
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>' => break,
                '\'' => {
                    self.i += 1;
                    w.started = true;
                    w.quoted = true;
                    while let Some(q) = self.peek() {
                        self.i += 1;
                        if q == '\'' {
                            break;
                        }
                        w.text.push(q);
                    }
                }
                '"' => {
                    self.i += 1;
                    w.started = true;
                    w.quoted = true;
                    self.double_quoted(&mut w);
                }
                '\\' => {
                    w.started = true;
                    w.quoted = true;
                    match self.peek_at(1) {
                        Some('\n') => {}
                        Some(next) => w.text.push(next),
                        None => {}
                    }
                    self.i += 2;
                }
                '$' => {
                    w.started = true;
                    self.dollar(&mut w, false);
                }
                '`' => {
                    w.started = true;
                    self.backtick(&mut w);
                }
                '{' | ',' | '}' => {
                    w.started = true;
                    w.text.push(match c {
                        '{' => OPEN,
                        ',' => COMMA,
                        _ => CLOSE,
                    });
                    self.i += 1;
                }
                other => {
                    w.started = true;
                    w.text.push(other);
                    self.i += 1;
                }
            }
            if self.out.too_deep {
                break;
            }
        }
        w
    }

    /// The inside of `"…"`, its opening quote consumed.
    fn double_quoted(&mut self, w: &mut Word) {
        while let Some(c) = self.peek() {
            match c {
                '"' => {
                    self.i += 1;
                    return;
                }
                '\\' => {
                    match self.peek_at(1) {
                        Some('\n') => {}
                        Some(e @ ('$' | '`' | '"' | '\\')) => w.text.push(e),
                        Some(other) => {
                            w.text.push('\\');
                            w.text.push(other);
                        }
                        None => w.text.push('\\'),
                    }
                    self.i += 2;
                }
                '$' => self.dollar(w, true),
                '`' => self.backtick(w),
                other => {
                    w.text.push(other);
                    self.i += 1;
                }
            }
            if self.out.too_deep {
                return;
            }
        }
    }

    /// `$` at `self.i`: `$(…)`, `$((…))`, `${…}`, `$'…'` or a plain `$`.
    fn dollar(&mut self, w: &mut Word, in_double_quotes: bool) {
        match self.peek_at(1) {
            Some('(') if self.peek_at(2) == Some('(') => {
                // Arithmetic: kept as written.
                let start = self.i;
                self.i += 3;
                self.skip_balanced();
                w.text.push_str(&self.text(start, self.i));
            }
            Some('(') => {
                self.i += 2;
                let start = self.i;
                self.substitution();
                let end = self.i.saturating_sub(1).max(start);
                w.text.push_str("$(");
                w.text.push_str(&self.text(start, end));
                w.text.push(')');
            }
            Some('{') => {
                let start = self.i;
                self.i += 2;
                self.skip_balanced_braces();
                w.text.push_str(&self.text(start, self.i));
            }
            Some('\'') if !in_double_quotes => {
                self.i += 2;
                w.quoted = true;
                self.ansi_c(w);
            }
            _ => {
                w.text.push('$');
                self.i += 1;
            }
        }
    }

    /// Reads a `$(…)` or `<(…)` body as commands; `self.i` is just past
    /// its `(`, and ends just past its `)`.
    fn substitution(&mut self) {
        if self.nesting >= MAX_NESTING {
            self.out.too_deep = true;
            self.i = self.chars.len();
            return;
        }
        self.nesting += 1;
        self.list(true);
        self.nesting -= 1;
    }

    /// Past the `))` of an arithmetic expansion.
    fn skip_balanced(&mut self) {
        let mut depth = 2;
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// Past the `}` closing a `${`.
    fn skip_balanced_braces(&mut self) {
        let mut depth = 1;
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// A backtick substitution: kept in the word as written, and read as
    /// a script of its own.
    fn backtick(&mut self, w: &mut Word) {
        self.i += 1;
        let mut inner = String::new();
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                '`' => break,
                '\\' => {
                    if let Some(next) = self.peek() {
                        if !matches!(next, '`' | '\\' | '$') {
                            inner.push('\\');
                        }
                        inner.push(next);
                        self.i += 1;
                    }
                }
                other => inner.push(other),
            }
        }
        w.text.push('`');
        w.text.push_str(&inner);
        w.text.push('`');
        self.out.scripts.push(inner);
    }

    /// The inside of `$'…'`, its opening consumed: C escapes undone.
    fn ansi_c(&mut self, w: &mut Word) {
        while let Some(c) = self.peek() {
            self.i += 1;
            if c == '\'' {
                return;
            }
            if c != '\\' {
                w.text.push(c);
                continue;
            }
            let Some(e) = self.peek() else { return };
            self.i += 1;
            let simple = match e {
                'n' => Some('\n'),
                't' => Some('\t'),
                'r' => Some('\r'),
                'a' => Some('\u{7}'),
                'b' => Some('\u{8}'),
                'e' | 'E' => Some('\u{1b}'),
                'f' => Some('\u{c}'),
                'v' => Some('\u{b}'),
                '\\' | '\'' | '"' | '?' => Some(e),
                _ => None,
            };
            if let Some(s) = simple {
                w.text.push(s);
                continue;
            }
            let (radix, max) = match e {
                'x' => (16, 2),
                'u' => (16, 4),
                'U' => (16, 8),
                '0'..='7' => {
                    self.i -= 1;
                    (8, 3)
                }
                _ => {
                    w.text.push('\\');
                    w.text.push(e);
                    continue;
                }
            };
            let mut value = 0u32;
            let mut digits = 0;
            while digits < max {
                let Some(d) = self.peek().and_then(|c| c.to_digit(radix)) else {
                    break;
                };
                value = value * radix + d;
                digits += 1;
                self.i += 1;
            }
            if let Some(ch) = char::from_u32(value) {
                w.text.push(ch);
            }
        }
    }
}

/// A command's words as the shell runs them: keywords in front dropped,
/// braces expanded, stand-ins turned back into the characters they were.
fn command_words(words: Vec<Word>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(words.len());
    let mut words = words.into_iter().peekable();
    // Keywords count only where a command starts.
    while let Some(w) = words.peek() {
        let text = restore(&w.text);
        if w.quoted {
            break;
        }
        match text.as_str() {
            "if" | "then" | "elif" | "else" | "fi" | "do" | "done" | "while" | "until" | "!"
            | "{" | "}" | "esac" | ";;" => {
                words.next();
            }
            // `for NAME in WORDS`, `select …`, `function NAME`: no command.
            "for" | "select" | "function" => return Vec::new(),
            // `case WORD in`: what follows is a pattern, then commands.
            "case" => {
                words.next();
                words.next();
                if words.peek().is_some_and(|w| !w.quoted && w.text == "in") {
                    words.next();
                }
            }
            _ => break,
        }
    }
    for w in words {
        if w.quoted && !w.text.contains([OPEN, COMMA, CLOSE]) {
            out.push(w.text);
            continue;
        }
        out.extend(expand_braces(&w.text).iter().map(|t| restore(t)));
    }
    out
}

fn restore(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            OPEN => '{',
            COMMA => ',',
            CLOSE => '}',
            other => other,
        })
        .collect()
}

/// `pre{a,b}post` as `preapost prebpost`, each alternative expanded in
/// turn; a word with no such brace is itself.
fn expand_braces(word: &str) -> Vec<String> {
    // Finding a brace's partner is linear per brace: bound the braces.
    if word.len() > MAX_BRACE_WORD || word.chars().filter(|&c| c == OPEN).count() > MAX_BRACE_WORDS
    {
        return vec![word.to_string()];
    }
    let mut out = Vec::new();
    expand_into(word, &mut out);
    if out.len() > MAX_BRACE_WORDS {
        return vec![word.to_string()];
    }
    out
}

fn expand_into(word: &str, out: &mut Vec<String>) {
    if out.len() > MAX_BRACE_WORDS {
        return;
    }
    let Some((open, close, commas)) = first_brace(word) else {
        out.push(word.to_string());
        return;
    };
    let (pre, post) = (&word[..open], &word[close + CLOSE.len_utf8()..]);
    let mut start = open + OPEN.len_utf8();
    for end in commas.into_iter().chain(std::iter::once(close)) {
        let alternative = &word[start..end];
        expand_into(&format!("{pre}{alternative}{post}"), out);
        start = end + COMMA.len_utf8();
    }
}

/// The byte offsets of the first `{` that has a matching `}` with a comma
/// at its own level between them, that `}`, and those commas.
fn first_brace(word: &str) -> Option<(usize, usize, Vec<usize>)> {
    for (open, c) in word.char_indices() {
        if c != OPEN {
            continue;
        }
        let mut depth = 0;
        let mut commas = Vec::new();
        for (i, c) in word[open..].char_indices() {
            let at = open + i;
            match c {
                OPEN => depth += 1,
                CLOSE => {
                    depth -= 1;
                    if depth == 0 {
                        if commas.is_empty() {
                            break;
                        }
                        return Some((open, at, commas));
                    }
                }
                COMMA if depth == 1 => commas.push(at),
                _ => {}
            }
        }
    }
    None
}

/// The `$(…)` and backtick bodies in text a shell expands but does not
/// otherwise run (an unquoted here-document's body).
fn substitutions_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(pos) = rest.find(['$', '`']) {
        let after = &rest[pos + 1..];
        if rest[pos..].starts_with("$(") {
            let inner = &rest[pos + 2..];
            let mut depth = 1;
            let mut end = inner.len();
            for (i, c) in inner.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            out.push(inner[..end].to_string());
            rest = &inner[(end + 1).min(inner.len())..];
        } else if rest[pos..].starts_with('`') {
            let end = after.find('`').unwrap_or(after.len());
            out.push(after[..end].to_string());
            rest = &after[(end + 1).min(after.len())..];
        } else {
            rest = after;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(script: &str) -> Vec<Vec<String>> {
        parse(script)
            .commands
            .into_iter()
            .map(|c| c.words)
            .collect()
    }

    #[test]
    fn quotes_escapes_and_separators_split_as_a_shell_does() {
        assert_eq!(
            argv("a 'b c' \"d $x\" e\\ f; g && h || i | j & k\nl"),
            [
                vec!["a", "b c", "d $x", "e f"],
                vec!["g"],
                vec!["h"],
                vec!["i"],
                vec!["j"],
                vec!["k"],
                vec!["l"],
            ]
        );
        assert_eq!(argv("r\"m\" $'\\x2frm\\n'"), [vec!["rm", "/rm\n"]]);
        assert_eq!(argv("echo \"a\\b\\$c\""), [vec!["echo", "a\\b$c"]]);
    }

    #[test]
    fn keywords_in_front_of_a_command_are_not_its_program() {
        assert_eq!(
            argv("if a; then b; elif c; else d; fi; for x in y; do e; done; ! f; { g; }; (h)"),
            [
                vec!["a"],
                vec!["b"],
                vec!["c"],
                vec!["d"],
                vec!["e"],
                vec!["f"],
                vec!["g"],
                vec!["h"],
            ]
        );
        assert_eq!(argv("'if' x"), [vec!["if", "x"]]);
        assert_eq!(argv("case $v in a) b;; esac"), [vec!["a"], vec!["b"]]);
    }

    #[test]
    fn braces_expand_one_word_into_several_unless_quoted() {
        assert_eq!(argv("{rm,-rf,/home}"), [vec!["rm", "-rf", "/home"]]);
        assert_eq!(argv("x/{a,b}{c,d}"), [vec!["x/ac", "x/ad", "x/bc", "x/bd"]]);
        assert_eq!(
            argv("echo '{a,b}' {} {x}"),
            [vec!["echo", "{a,b}", "{}", "{x}"]]
        );
        let many = format!("echo {}", "{a,b}".repeat(10));
        assert_eq!(
            argv(&many)[0].len(),
            2,
            "past the cap a word stays as written"
        );
    }

    #[test]
    fn redirections_are_targets_not_arguments() {
        let s = parse("cat a > /etc/x 2>/dev/null >>y <in &>z 2>&1");
        assert_eq!(s.commands[0].words, ["cat", "a"]);
        assert_eq!(s.commands[0].writes, ["/etc/x", "/dev/null", "y", "z"]);
    }

    #[test]
    fn here_documents_and_here_strings_are_input_not_commands() {
        let s = parse("cat <<'EOF' | sh\nrm -rf /\nEOF\nls <<< 'hi'");
        assert_eq!(s.commands.len(), 3);
        assert_eq!(s.commands[0].input, ["rm -rf /\n"]);
        assert!(s.commands[1].piped);
        assert_eq!(s.commands[2].words, ["ls"]);
        assert_eq!(s.commands[2].input, ["hi"]);
        let s = parse("cat <<EOF\n$(rm -rf /)\nEOF");
        assert_eq!(s.scripts, ["rm -rf /"]);
    }

    #[test]
    fn substitutions_are_read_as_commands_and_stay_in_their_word() {
        let s = parse("echo \"$(rm -rf / )\" `ls`; diff <(a b) x");
        let words: Vec<_> = s.commands.iter().map(|c| c.words.clone()).collect();
        assert_eq!(
            words,
            [
                vec!["rm", "-rf", "/"],
                vec!["echo", "$(rm -rf / )", "`ls`"],
                vec!["a", "b"],
                vec!["diff", "x"],
            ]
        );
        assert_eq!(s.scripts, ["ls"]);
        let deep = format!("{}x{}", "$(".repeat(20), ")".repeat(20));
        assert!(parse(&deep).too_deep);
    }
}
