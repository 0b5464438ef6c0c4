//! The guides' examples, run: every `tenure …`, `curl …`, `tenure-guard …` and `psql …` line
//! of the ```sh blocks of README.md and docs/api-guide.md runs, in page order, against a fresh
//! three-node cluster per page (its HTTP gateway on), and must exit and print what the page
//! shows. `$TENURE_HTTP` in a `curl` line is the first node's gateway
//! (`http://127.0.0.1:PORT`). `$TENURE_GUARD_PG` is a PostgreSQL server of the page's own,
//! started at the first line that needs it (`tenure_guard::test_server`), and is in every
//! command's environment; where no PostgreSQL is installed those lines are skipped with a
//! note, unless `TENURE_REQUIRE_POSTGRES` is set. `kill -STOP $!` and `kill -CONT $!` stop and
//! continue the last `background` command (which must still be running). Needs
//! `target/debug/tenure` (`cargo build --bin tenure`, or `$TENURE_BIN`), `curl`, and for the
//! guards `target/debug/tenure-guard` (or `$TENURE_GUARD_BIN`) and `psql`.
//!
//! How a page is read (docs/api-guide.md says the same for writers, in its introduction):
//! - The `#` lines that start a line right under a command are its output, all of it; a line
//!   holding only `…` stands for any lines. An indented `#` line continues the inline comment
//!   above it.
//! - An inline comment (`tenure … # text`) is an expectation only if it starts with `exit N` or
//!   a verdict (`granted`, `not granted`, `valid`, `not valid`, `renewed`, `released`,
//!   `transferred`, `booked`, `cancelled`, `error`). The output must then start with its text,
//!   each `, ` outside parentheses standing for `…`. Any other inline comment is prose.
//! - The exit code is `exit N` of the inline comment or at the end of an output line (after
//!   three spaces or more), otherwise 0. Three spaces or more and a `(…)` ending a line is a
//!   remark, not output.
//! - Runs of blanks count as one. `…` stands for any text. The duration after `expires in`
//!   matches any duration. Numbers of two digits or more (not part of a name, a decimal or a
//!   duration such as `30s`), single capital letters (`N`, not a flag such as curl's `-X`) and
//!   RFC 3339 instants stand for what this run printed: bound where first matched, then
//!   required in later output and substituted into later commands (`--token 1187` runs as
//!   `--token 4`). Two numbers of the page never stand for the same number of the run. A number
//!   a command sends as the page wrote it (bound to nothing yet) is itself in that command's
//!   output, and so is the status after `HTTP/1.1 `.
//! - In a command, `…` inside a word is a fixed filler (the elided tokens of a token file).
//!
//! Directives are HTML comments on a line of their own, right before a block (a renderer
//! hides them):
//! - `<!-- guide-test: skip: WHY -->` the block is not run; `` skip `PREFIX`: WHY `` its lines
//!   starting with PREFIX are not. Every other line of a block must be a `tenure`, `curl`,
//!   `tenure-guard`, `psql` or `kill` command.
//! - `` background `PREFIX` `` starts that line (without the `&` that may end it) and goes on; the test awaits it where an
//!   output line ending in `answers:` introduces its output, or at the end of the block.
//!   An expectation (`# exit 1: …`, as inline) may follow the prefix.
//! - `` interrupt `PREFIX` `` for a line that runs until Ctrl-C: at the end of the block the
//!   test awaits its first output lines, as many as the page shows, then sends SIGINT. It must
//!   still be running then; its exit code is not checked.
//! - `` run `COMMAND` `` a hidden step, run where the comment is or, with `` after `PREFIX` ``,
//!   right after that line of the next block; an expectation may follow (`# granted, …`).
//! - `token-file` the next ```text block is a token file: the rest of the section runs on its
//!   own cluster whose nodes read it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use tenure_guard::test_server::TestServer;
use tenure_tests::cli::{Cli, Running};
use tenure_tests::in_process::InProcessCluster;
use tenure_tests::ELECTION;

/// What `…` inside a command's word stands for: long enough for a token (32 bytes or more).
const FILLER: &str = "0123456789abcdef0123456789ab";
const VERDICTS: [&str; 10] = [
    "granted",
    "not granted",
    "valid",
    "not valid",
    "renewed",
    "released",
    "transferred",
    "booked",
    "cancelled",
    "error",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_examples_are_true() {
    run_page("README.md", include_str!("../../README.md")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_guide_examples_are_true() {
    run_page("docs/api-guide.md", include_str!("../../docs/api-guide.md")).await;
}

// ---------------------------------------------------------------------------------------
// Reading a page

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Foreground,
    Background,
    Interrupt,
}

/// One command line of a page (or of a hidden `run`), with what the page says it prints.
#[derive(Clone, Debug)]
struct Command {
    at: usize,
    line: String,
    mode: Mode,
    /// The inline comment, continuation lines included (an expectation or prose).
    comment: String,
    /// The comment is a `background` directive's expectation, not the page's.
    comment_from_directive: bool,
    /// The output lines shown under it, remarks and `exit N` taken off.
    output: Vec<String>,
    /// `exit N` at the end of an output line.
    output_exit: Option<i32>,
}

#[derive(Debug)]
enum Step {
    Run(Command),
    /// Await the oldest background command (its output is shown at this line).
    Await,
    /// Await every background and interrupt command still running.
    EndBlock,
    /// The section's commands from here run on a cluster with this token file.
    Secure(String),
    /// Back on the page's own cluster.
    Plain,
}

#[derive(Debug)]
enum Directive {
    Skip(Option<String>),
    Background(String, String),
    Interrupt(String),
    Run(Command, Option<String>),
    TokenFile,
}

/// Splits `` `text` rest `` into its quoted text and the rest.
fn quoted(text: &str) -> Option<(String, &str)> {
    let rest = text.trim_start().strip_prefix('`')?;
    let (inner, rest) = rest.split_once('`')?;
    Some((inner.to_string(), rest.trim_start()))
}

impl Command {
    fn new(at: usize, line: String, comment: &str) -> Command {
        Command {
            at,
            line,
            mode: Mode::Foreground,
            comment: comment.trim().trim_start_matches('#').trim().to_string(),
            comment_from_directive: false,
            output: Vec::new(),
            output_exit: None,
        }
    }
}

fn directive(page: &str, at: usize, text: &str) -> Directive {
    let keyword_len = text
        .find(|c: char| !(c.is_ascii_alphabetic() || c == '-'))
        .unwrap_or(text.len());
    let (keyword, rest) = text.split_at(keyword_len);
    let bad = |why: &str| -> ! { panic!("{page}:{at}: directive `{text}`: {why}") };
    match keyword {
        "skip" => {
            let (prefix, rest) = match quoted(rest) {
                Some((prefix, rest)) => (Some(prefix), rest),
                None => (None, rest),
            };
            match rest.trim_start().strip_prefix(':') {
                Some(why) if !why.trim().is_empty() => Directive::Skip(prefix),
                _ => bad("a skip says why: `skip: WHY`"),
            }
        }
        "background" => {
            let (prefix, rest) = quoted(rest).unwrap_or_else(|| bad("needs a `PREFIX`"));
            Directive::Background(prefix, rest.trim_start_matches('#').trim().to_string())
        }
        "interrupt" => Directive::Interrupt(quoted(rest).unwrap_or_else(|| bad("`PREFIX`")).0),
        "run" => {
            let (command, rest) = quoted(rest).unwrap_or_else(|| bad("needs a `COMMAND`"));
            let (after, rest) = match rest.strip_prefix("after") {
                Some(rest) => {
                    let (prefix, rest) = quoted(rest).unwrap_or_else(|| bad("after `PREFIX`"));
                    (Some(prefix), rest)
                }
                None => (None, rest),
            };
            if !is_tenure(&command) {
                bad("runs only `tenure` commands");
            }
            Directive::Run(Command::new(at, command, rest), after)
        }
        "token-file" => Directive::TokenFile,
        _ => bad("unknown directive"),
    }
}

/// A command line and its inline comment: the first `#` after a blank, outside quotes.
fn split_comment(line: &str) -> (&str, &str) {
    let mut quote = None;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if previous.is_whitespace() => {
                return (line[..i].trim(), line[i + 1..].trim());
            }
            _ => {}
        }
        previous = c;
    }
    (line.trim(), "")
}

/// Its words as a shell splits them (quotes, no expansion).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut in_word, mut quote) = (Vec::new(), String::new(), false, None);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => (quote, in_word) = (Some(c), true),
            (None, c) if c.is_whitespace() => {
                if std::mem::take(&mut in_word) {
                    words.push(std::mem::take(&mut word));
                }
            }
            (None, c) => (in_word, _) = (true, word.push(c)),
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// `NAME=value` words before the program.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
    })
}

/// The program a command line runs (after its `NAME=value` words).
fn program(command: &str) -> Option<String> {
    shell_words(command)
        .into_iter()
        .find(|word| !is_assignment(word))
}

fn is_tenure(command: &str) -> bool {
    program(command).is_some_and(|program| program == "tenure")
}

/// The programs a guide's blocks may run (`kill` of a background command: [`Runner::kill`]).
fn is_runnable(command: &str) -> bool {
    program(command).is_some_and(|program| {
        ["tenure", "curl", "tenure-guard", "psql", "kill"].contains(&program.as_str())
    })
}

/// Whether a command needs the page's PostgreSQL.
fn needs_postgres(command: &str) -> bool {
    command.contains("$TENURE_GUARD_PG")
        || program(command).is_some_and(|program| program == "tenure-guard" || program == "psql")
}

/// An output line's text, its `exit N` (after three blanks or more) and remark taken off.
fn output_line(text: &str) -> (String, Option<i32>) {
    let mut text = text.trim_end().to_string();
    let mut exit = None;
    if let Some(at) = text.rfind("   exit ") {
        if let Ok(code) = text[at + 8..].trim().parse() {
            exit = Some(code);
            text.truncate(at);
        }
    }
    (strip_remark(&text).trim().to_string(), exit)
}

/// Without a trailing `   (remark)`.
fn strip_remark(text: &str) -> &str {
    let text = text.trim_end();
    match text.rfind("   (") {
        Some(at) if text.ends_with(')') => text[..at].trim_end(),
        _ => text,
    }
}

/// An inline comment as an expectation: its exit code and the text the output starts with.
fn inline_expectation(comment: &str) -> Option<(Option<i32>, String)> {
    let comment = strip_remark(comment);
    if let Some(rest) = comment.strip_prefix("exit ") {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if let Ok(code) = rest[..digits].parse() {
            let text = rest[digits..].trim_start_matches(':').trim();
            return Some((Some(code), text.to_string()));
        }
    }
    VERDICTS
        .iter()
        .any(|verdict| {
            comment
                .strip_prefix(verdict)
                .is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
        })
        .then(|| (None, comment.to_string()))
}

fn parse(page: &str, text: &str) -> Vec<Step> {
    let lines: Vec<&str> = text.lines().collect();
    let (mut steps, mut directives, mut secure, mut i) = (Vec::new(), Vec::new(), false, 0);
    while i < lines.len() {
        let (at, line) = (i + 1, lines[i]);
        i += 1;
        if line.starts_with("## ") && std::mem::take(&mut secure) {
            steps.push(Step::Plain);
        }
        if let Some(text) = line
            .trim()
            .strip_prefix("<!-- guide-test:")
            .and_then(|rest| rest.strip_suffix("-->"))
        {
            match directive(page, at, text.trim()) {
                Directive::Run(command, None) => steps.push(Step::Run(command)),
                other => directives.push((at, other)),
            }
        } else if let Some(lang) = line.strip_prefix("```") {
            let end = (i..lines.len())
                .find(|j| lines[*j].starts_with("```"))
                .unwrap_or_else(|| panic!("{page}:{at}: a block that never ends"));
            let body = &lines[i..end];
            let directives = std::mem::take(&mut directives);
            if lang == "sh" {
                block(page, at + 1, body, directives, &mut steps);
            } else if matches!(directives.as_slice(), [(_, Directive::TokenFile)]) {
                steps.push(Step::Secure(body.join("\n").replace('…', FILLER)));
                secure = true;
            } else if let Some((at, _)) = directives.first() {
                panic!("{page}:{at}: a directive before a ```{lang} block");
            }
            i = end + 1;
        } else if let (Some((at, _)), false) = (directives.first(), line.trim().is_empty()) {
            panic!("{page}:{at}: a directive that no block follows");
        }
    }
    steps
}

/// What the lines under a command belong to.
#[derive(Clone, Copy)]
enum Under {
    Nothing,
    Skipped,
    Step(usize),
}

/// The steps of one ```sh block whose first line is line `first`.
fn block(
    page: &str,
    first: usize,
    body: &[&str],
    directives: Vec<(usize, Directive)>,
    steps: &mut Vec<Step>,
) {
    if directives
        .iter()
        .any(|(_, d)| matches!(d, Directive::Skip(None)))
    {
        return;
    }
    let mut used = vec![false; directives.len()];
    let (mut under, mut background, mut j) = (Under::Nothing, VecDeque::new(), 0);
    while j < body.len() {
        let at = first + j;
        let mut line = body[j].to_string();
        while line.ends_with('\\') && j + 1 < body.len() {
            line.pop();
            j += 1;
            line.push_str(body[j]);
        }
        j += 1;
        let comment = line.trim_start().strip_prefix('#');
        match (under, comment) {
            (_, None) if line.trim().is_empty() => under = Under::Nothing,
            (Under::Nothing, Some(_)) => panic!("{page}:{at}: a comment under no command"),
            (Under::Skipped, Some(_)) => {}
            (Under::Step(k), Some(text)) if line.starts_with('#') => {
                if text.trim_end().ends_with("answers:") {
                    let k = background.pop_front().unwrap_or_else(|| {
                        panic!("{page}:{at}: `answers:` with no background command running")
                    });
                    steps.push(Step::Await);
                    under = Under::Step(k);
                } else if let Step::Run(c) = &mut steps[k] {
                    let (text, exit) = output_line(text);
                    c.output.push(text);
                    c.output_exit = c.output_exit.or(exit);
                }
            }
            (Under::Step(k), Some(text)) => {
                if let Step::Run(c) = &mut steps[k] {
                    if !c.comment_from_directive {
                        c.comment = format!("{}   {}", c.comment, text.trim());
                    }
                }
            }
            (_, None) => {
                under = command(page, at, &line, &directives, &mut used, steps);
                if let Under::Step(k) = under {
                    if matches!(&steps[k], Step::Run(c) if c.mode == Mode::Background) {
                        background.push_back(k);
                    }
                }
            }
        }
    }
    steps.push(Step::EndBlock);
    if let Some(((at, d), _)) = directives.iter().zip(&used).find(|(_, used)| !**used) {
        panic!("{page}:{at}: directive {d:?} matches no line of the block at line {first}");
    }
}

/// One command line of a block: skipped, or a step (and the hidden steps that follow it).
fn command(
    page: &str,
    at: usize,
    line: &str,
    directives: &[(usize, Directive)],
    used: &mut [bool],
    steps: &mut Vec<Step>,
) -> Under {
    let (line, comment) = split_comment(line);
    let mut mode = Mode::Foreground;
    let mut extra = String::new();
    for ((_, d), used) in directives.iter().zip(used.iter_mut()) {
        match d {
            Directive::Skip(Some(prefix)) if line.starts_with(prefix.as_str()) => {
                *used = true;
                return Under::Skipped;
            }
            Directive::Background(prefix, expect) if line.starts_with(prefix.as_str()) => {
                (*used, mode, extra) = (true, Mode::Background, expect.clone());
            }
            Directive::Interrupt(prefix) if line.starts_with(prefix.as_str()) => {
                (*used, mode) = (true, Mode::Interrupt);
            }
            _ => {}
        }
    }
    assert!(
        is_runnable(line),
        "{page}:{at}: `{line}` is neither a tenure nor a curl command: \
         mark it <!-- guide-test: skip `PREFIX`: WHY -->"
    );
    let from_directive = !extra.is_empty();
    let mut step = Command::new(
        at,
        line.to_string(),
        if from_directive { &extra } else { comment },
    );
    (step.mode, step.comment_from_directive) = (mode, from_directive);
    steps.push(Step::Run(step));
    let k = steps.len() - 1;
    for ((_, d), used) in directives.iter().zip(used.iter_mut()) {
        if let Directive::Run(hidden, Some(prefix)) = d {
            if line.starts_with(prefix.as_str()) {
                *used = true;
                steps.push(Step::Run(hidden.clone()));
            }
        }
    }
    Under::Step(k)
}

// ---------------------------------------------------------------------------------------
// Matching output

#[derive(Clone, Debug, PartialEq)]
enum Seg {
    Lit(String),
    /// `…`
    Any,
    /// A number or a placeholder letter of the page: digits in the output.
    Number(String),
    /// An RFC 3339 instant of the page.
    Instant(String),
    /// The duration after `expires in`.
    Duration,
}

/// The length of the RFC 3339 instant at `at`, if one starts there.
fn instant_at(text: &[char], at: usize) -> Option<usize> {
    let shape = "dddd-dd-ddTdd:dd:dd";
    let fits = |i: usize, s: char| {
        text.get(at + i).is_some_and(|c| {
            if s == 'd' {
                c.is_ascii_digit()
            } else {
                *c == s
            }
        })
    };
    if !shape.chars().enumerate().all(|(i, s)| fits(i, s)) {
        return None;
    }
    let mut n = shape.len();
    if fits(n, '.') {
        n += 1 + digits_at(text, at + n + 1);
    }
    if fits(n, 'Z') {
        n += 1;
    } else if (fits(n, '+') || fits(n, '-'))
        && (1..6).all(|i| fits(n + i, "dd:dd".as_bytes()[i - 1] as char))
    {
        n += 6;
    }
    Some(n)
}

fn digits_at(text: &[char], at: usize) -> usize {
    text[at.min(text.len())..]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .count()
}

/// The length of the duration (`9m 59s 842ms`) at `at`, if one starts there.
fn duration_at(text: &[char], at: usize) -> Option<usize> {
    let unit = |from: usize| {
        let digits = digits_at(text, from);
        let letters = text[(from + digits).min(text.len())..]
            .iter()
            .take_while(|c| c.is_ascii_lowercase() || **c == 'µ')
            .count();
        (digits > 0 && letters > 0).then_some(digits + letters)
    };
    let mut n = unit(at)?;
    while text.get(at + n) == Some(&' ') {
        match unit(at + n + 1) {
            Some(more) => n += 1 + more,
            None => break,
        }
    }
    Some(n)
}

/// A page's text as segments. Runs of blanks are one space.
fn segments(text: &str) -> Vec<Seg> {
    let text: Vec<char> = normalize(text).chars().collect();
    // A value stands apart: not a piece of a name (`match/8841`), decimal or duration (`30s`).
    let joins = |c: Option<&char>| c.is_some_and(|c| c.is_alphanumeric() || "/.-…".contains(*c));
    let apart = |c: Option<&char>| !c.is_some_and(|c| c.is_alphanumeric() || *c == '_');
    let expires_in: Vec<char> = "expires in ".chars().collect();
    let http_status: Vec<char> = "HTTP/1.1 ".chars().collect();
    let (mut segs, mut i) = (Vec::<Seg>::new(), 0);
    while i < text.len() {
        let (before, digits) = (i.checked_sub(1).map(|b| &text[b]), digits_at(&text, i));
        let (seg, len) = if text[i] == '…' {
            (Seg::Any, 1)
        } else if let Some(n) = instant_at(&text, i).filter(|_| !joins(before)) {
            (Seg::Instant(text[i..i + n].iter().collect()), n)
        } else if let Some(n) = duration_at(&text, i).filter(|_| text[..i].ends_with(&expires_in)) {
            (Seg::Duration, n)
        } else if digits >= 2
            && !joins(before)
            && !joins(text.get(i + digits))
            && !text[..i].ends_with(&http_status)
        {
            (Seg::Number(text[i..i + digits].iter().collect()), digits)
        } else if text[i].is_ascii_uppercase()
            && apart(before)
            && before != Some(&'-')
            && apart(text.get(i + 1))
        {
            (Seg::Number(text[i].to_string()), 1)
        } else {
            (Seg::Lit(text[i].to_string()), 1)
        };
        match (segs.last_mut(), seg) {
            (Some(Seg::Lit(lit)), Seg::Lit(more)) => lit.push_str(&more),
            (_, seg) => segs.push(seg),
        }
        i += len;
    }
    segs
}

fn normalize(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What the page's values stand for in this run.
#[derive(Clone, Default)]
struct Bindings {
    values: HashMap<String, String>,
    /// The run's numbers a page's number stands for.
    numbers_taken: HashSet<String>,
}

impl Bindings {
    /// `doc` bound to `actual`; `None` if another number of the page has that value.
    fn bind(&self, doc: &str, actual: String, number: bool) -> Option<Bindings> {
        let mut next = self.clone();
        if number && !next.numbers_taken.insert(actual.clone()) {
            return None;
        }
        next.values.insert(doc.to_string(), actual);
        Some(next)
    }

    /// A command of the page as this run must send it.
    fn substitute(&self, line: &str) -> Result<String, String> {
        let mut out = String::new();
        for seg in segments(line) {
            match seg {
                Seg::Lit(text) => out.push_str(&text),
                Seg::Any => out.push_str(FILLER),
                Seg::Duration => unreachable!("no `expires in` in a command"),
                Seg::Number(doc) | Seg::Instant(doc) => match self.values.get(&doc) {
                    Some(actual) => out.push_str(actual),
                    None if doc.len() == 1 => {
                        return Err(format!("`{doc}` is used before any output showed it"))
                    }
                    None => out.push_str(&doc),
                },
            }
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        let mut pairs: Vec<String> = self
            .values
            .iter()
            .filter(|(doc, actual)| doc != actual)
            .map(|(doc, actual)| format!("{doc}→{actual}"))
            .collect();
        pairs.sort();
        pairs.join(" ")
    }
}

/// Matches `text` against `segs`, binding the page's values.
fn match_segs(segs: &[Seg], text: &[char], b: &Bindings) -> Option<Bindings> {
    let Some((first, rest)) = segs.split_first() else {
        return text.is_empty().then(|| b.clone());
    };
    match first {
        Seg::Lit(lit) => {
            let lit: Vec<char> = lit.chars().collect();
            text.starts_with(&lit)
                .then(|| match_segs(rest, &text[lit.len()..], b))
                .flatten()
        }
        Seg::Any => (0..=text.len()).find_map(|k| match_segs(rest, &text[k..], b)),
        Seg::Duration => match_segs(rest, &text[duration_at(text, 0)?..], b),
        Seg::Number(doc) | Seg::Instant(doc) => {
            let number = matches!(first, Seg::Number(_));
            let n = if number {
                digits_at(text, 0)
            } else {
                instant_at(text, 0).unwrap_or(0)
            };
            let actual: String = text[..n].iter().collect();
            let b = match b.values.get(doc) {
                _ if n == 0 => return None,
                Some(value) if *value == actual => b.clone(),
                Some(_) => return None,
                None => b.bind(doc, actual, number)?,
            };
            match_segs(rest, &text[n..], &b)
        }
    }
}

/// Matches output lines against the page's lines; a line `…` stands for any lines.
fn match_lines(expected: &[Vec<Seg>], actual: &[Vec<char>], b: &Bindings) -> Option<Bindings> {
    let Some((first, rest)) = expected.split_first() else {
        return actual.is_empty().then(|| b.clone());
    };
    if first.as_slice() == [Seg::Any] {
        return (0..=actual.len()).find_map(|k| match_lines(rest, &actual[k..], b));
    }
    let (line, others) = actual.split_first()?;
    match_lines(rest, others, &match_segs(first, line, b)?)
}

/// The inline expectation as segments: the output starts with it, `, ` being `…`.
fn inline_segments(text: &str) -> Vec<Seg> {
    let (mut pattern, mut depth) = (String::new(), 0);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        depth += match c {
            '(' => 1,
            ')' => -1,
            _ => 0,
        };
        if c == ',' && depth == 0 && chars.peek() == Some(&' ') {
            pattern.push_str(" …");
        } else {
            pattern.push(c);
        }
    }
    let mut segs = segments(&pattern);
    segs.push(Seg::Any);
    segs
}

// ---------------------------------------------------------------------------------------
// Running a page

/// A command started and not yet checked.
struct Started {
    command: Command,
    ran_as: String,
    running: Running,
}

struct Runner {
    page: &'static str,
    endpoints: String,
    /// The first node's gateway, for `$TENURE_HTTP`.
    http: String,
    /// The cluster of a `token-file` section, its endpoints and its gateway.
    secure: Option<(InProcessCluster, String, String)>,
    bindings: Bindings,
    running: VecDeque<Started>,
    dir: tempfile::TempDir,
    failures: Vec<String>,
    /// The page's PostgreSQL: not started yet (None), none installed (`Some(None)`), or
    /// running.
    postgres: Option<Option<TestServer>>,
}

/// A three-node cluster whose nodes take `flags` and serve the HTTP gateway; its endpoints
/// for `TENURE_ENDPOINTS` and its first node's gateway for `$TENURE_HTTP`.
async fn start_cluster(flags: &[String]) -> (InProcessCluster, String, String) {
    let mut flags = flags.to_vec();
    flags.extend(["--http-listen".to_string(), "127.0.0.1:0".to_string()]);
    let cluster = InProcessCluster::start(3, tenure_tests::same_flags(3, &flags))
        .await
        .expect("cluster");
    cluster.leader(ELECTION).await.expect("a leader");
    let addrs: Vec<&str> = cluster.addrs.values().map(String::as_str).collect();
    let endpoints = addrs.join(",");
    let first = *cluster.addrs.keys().next().expect("a node");
    let http = format!("http://{}", cluster.http_addr(first).expect("a gateway"));
    (cluster, endpoints, http)
}

async fn run_page(page: &'static str, text: &str) {
    let begun = Instant::now();
    let steps = parse(page, text);
    let (_cluster, endpoints, http) = start_cluster(&[]).await;
    let mut runner = Runner {
        page,
        endpoints,
        http,
        secure: None,
        bindings: Bindings::default(),
        running: VecDeque::new(),
        dir: tempfile::tempdir().expect("temp dir"),
        failures: Vec::new(),
        postgres: None,
    };
    for step in steps {
        runner.step(step).await;
    }
    eprintln!("{page}: {:.1?}", begun.elapsed());
    assert!(
        runner.failures.is_empty(),
        "{} example(s) of {page} are untrue:\n\n{}",
        runner.failures.len(),
        runner.failures.join("\n\n")
    );
}

impl Runner {
    async fn step(&mut self, step: Step) {
        match step {
            Step::Run(command) if !self.postgres_for(&command) => {}
            Step::Run(command) if program(&command.line).is_some_and(|p| p == "kill") => {
                self.kill(&command);
            }
            Step::Run(command) => {
                if let Some(started) = self.start(command) {
                    match started.command.mode {
                        Mode::Foreground => self.finish(started).await,
                        Mode::Background | Mode::Interrupt => self.running.push_back(started),
                    }
                }
            }
            Step::Await => {
                // None when the background command could not start (a failure on record).
                if let Some(started) = self.running.pop_front() {
                    self.finish(started).await;
                }
            }
            Step::EndBlock => {
                while let Some(started) = self.running.pop_front() {
                    self.finish(started).await;
                }
            }
            Step::Secure(tokens) => {
                let path = self.dir.path().join("tokens");
                tenure_tests::write_secret(&path, &tokens);
                let flags = ["--token-file".to_string(), path.display().to_string()];
                self.secure = Some(start_cluster(&flags).await);
            }
            Step::Plain => self.secure = None,
        }
    }

    fn start(&mut self, command: Command) -> Option<Started> {
        let (endpoints, http) = match &self.secure {
            Some((_, endpoints, http)) => (endpoints.clone(), http.clone()),
            None => (self.endpoints.clone(), self.http.clone()),
        };
        let postgres = match &self.postgres {
            Some(Some(server)) => server.conn().to_owned(),
            _ => String::new(),
        };
        let ran_as = match self.bindings.substitute(&command.line) {
            Ok(line) => line
                .replace("$TENURE_HTTP", &http)
                .replace("$TENURE_GUARD_PG", &postgres),
            Err(why) => {
                self.fail(&command, &command.line, why);
                return None;
            }
        };
        // A trailing `&` is the shell's: the `background` directive runs the line so.
        let ran_as = match ran_as.trim_end().strip_suffix(" &") {
            Some(line) => line.to_string(),
            None => ran_as,
        };
        let words = shell_words(&ran_as);
        let quiet = String::from("-q");
        let (env, mut args): (Vec<&String>, Vec<&String>) = {
            let split = words.iter().position(|w| !is_assignment(w)).unwrap_or(0);
            (
                words[..split].iter().collect(),
                words[split + 1..].iter().collect(),
            )
        };
        let mut cli = Cli::of([&endpoints]).in_dir(self.dir.path());
        match program(&ran_as).as_deref() {
            Some("curl") => {
                // No ~/.curlrc (`-q`, first) and no proxy: the page's command, as written.
                cli = cli.running("curl").with_env("NO_PROXY", "*");
                args.insert(0, &quiet);
            }
            Some("tenure-guard") => {
                let bin = tenure_tests::process::tenure_guard_bin();
                cli = cli.running(&bin.display().to_string());
            }
            // No ~/.psqlrc.
            Some("psql") => cli = cli.running("psql").with_env("PSQLRC", "/dev/null"),
            _ => {}
        }
        if !postgres.is_empty() {
            cli = cli.with_env("TENURE_GUARD_PG", &postgres);
        }
        for assignment in env {
            let (name, value) = assignment.split_once('=').unwrap_or_default();
            cli = cli.with_env(name, value);
        }
        let mut running = cli.spawn_args(&args);
        running.close_stdin();
        Some(Started {
            command,
            ran_as,
            running,
        })
    }

    /// Awaits a started command (an interrupted one: its first lines, then SIGINT) and
    /// checks it.
    async fn finish(&mut self, mut started: Started) {
        let mut stdout = Vec::new();
        if started.command.mode == Mode::Interrupt {
            let shown = started.command.output.len();
            while stdout.len() < shown {
                match started.running.next_line().await {
                    Ok(Some(line)) => stdout.push(line),
                    _ => break,
                }
            }
            if let Some(status) = started.running.exited() {
                let why = format!("ended by itself ({status}) before Ctrl-C");
                return self.fail(&started.command, &started.ran_as, why);
            }
            started.running.interrupt_until_exited().await;
        }
        let ran = match started.running.end().await {
            Ok(ran) => ran,
            Err(why) => return self.fail(&started.command, &started.ran_as, why),
        };
        let actual: Vec<String> = stdout
            .iter()
            .map(String::as_str)
            .chain(ran.stdout.lines())
            .chain(ran.stderr.lines())
            .map(normalize)
            .filter(|line| !line.is_empty())
            .collect();
        self.check(&started.command, &started.ran_as, ran.code, &actual);
    }

    fn check(&mut self, command: &Command, ran_as: &str, code: Option<i32>, actual: &[String]) {
        let inline = inline_expectation(&command.comment);
        let exit = inline
            .as_ref()
            .and_then(|(exit, _)| *exit)
            .or(command.output_exit)
            .unwrap_or(0);
        let mut matched = Some(self.bindings.clone());
        if command.mode != Mode::Interrupt && code != Some(exit) {
            matched = None;
        }
        // A number the command sent as the page wrote it (bound to nothing yet) comes back as
        // it was: in its output it is that number, not a value of the run.
        let sent: HashSet<String> = segments(&command.line)
            .into_iter()
            .filter_map(|seg| match seg {
                Seg::Number(n) if n.len() > 1 && !self.bindings.values.contains_key(&n) => Some(n),
                _ => None,
            })
            .collect();
        let as_sent = |segs: Vec<Seg>| -> Vec<Seg> {
            segs.into_iter()
                .map(|seg| match seg {
                    Seg::Number(n) if sent.contains(&n) => Seg::Lit(n),
                    seg => seg,
                })
                .collect()
        };
        if !command.output.is_empty() {
            let mut expected: Vec<Vec<Seg>> = command
                .output
                .iter()
                .map(|l| as_sent(segments(l)))
                .collect();
            if command.mode == Mode::Interrupt {
                expected.push(vec![Seg::Any]);
            }
            let lines: Vec<Vec<char>> = actual.iter().map(|l| l.chars().collect()).collect();
            matched = matched.and_then(|b| match_lines(&expected, &lines, &b));
        }
        if let Some((_, text)) = inline.as_ref().filter(|(_, text)| !text.is_empty()) {
            let joined: Vec<char> = actual.join(" ").chars().collect();
            matched =
                matched.and_then(|b| match_segs(&as_sent(inline_segments(text)), &joined, &b));
        }
        match matched {
            Some(bindings) => self.bindings = bindings,
            None => {
                let mut shown = vec![format!("exit {exit}")];
                shown.extend(inline.map(|(_, text)| text).filter(|t| !t.is_empty()));
                shown.extend(command.output.iter().cloned());
                let code = code.map_or("a signal".into(), |c| c.to_string());
                let why = format!(
                    "expected: {}\n  actual:   exit {code}\n            {}",
                    shown.join("\n            "),
                    actual.join("\n            ")
                );
                self.fail(command, ran_as, why);
            }
        }
    }

    /// Whether `command` can run: it needs no PostgreSQL, or the page's is running (started
    /// here the first time). Where none is installed (and none is required) it and every
    /// `kill` after it are skipped, with a note the first time.
    fn postgres_for(&mut self, command: &Command) -> bool {
        let kill = program(&command.line).is_some_and(|p| p == "kill");
        let skipped_before = matches!(self.postgres, Some(None));
        if !(needs_postgres(&command.line) || kill && skipped_before) {
            return true;
        }
        let page = self.page;
        let server = self
            .postgres
            .get_or_insert_with(|| TestServer::for_test(&format!("{page}'s PostgreSQL examples")));
        server.is_some()
    }

    /// `kill -STOP $!` or `kill -CONT $!`: stops or continues the last background command,
    /// which must still be running.
    fn kill(&mut self, command: &Command) {
        let words = shell_words(&command.line);
        let signal = match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["kill", "-STOP", "$!"] => nix::sys::signal::Signal::SIGSTOP,
            ["kill", "-CONT", "$!"] => nix::sys::signal::Signal::SIGCONT,
            _ => {
                let why = "the guide test runs only `kill -STOP $!` and `kill -CONT $!`".into();
                return self.fail(command, &command.line, why);
            }
        };
        let pid = self.running.back_mut().and_then(|last| {
            let running = last.running.exited().is_none();
            last.running.child.id().filter(|_| running)
        });
        let Some(pid) = pid else {
            let why = "no background command is running".into();
            return self.fail(command, &command.line, why);
        };
        let pid = nix::unistd::Pid::from_raw(pid as i32);
        match nix::sys::signal::kill(pid, signal) {
            Ok(()) => self.check(command, &command.line, Some(0), &[]),
            Err(e) => self.fail(command, &command.line, format!("{signal}: {e}")),
        }
    }

    fn fail(&mut self, command: &Command, ran_as: &str, why: String) {
        self.failures.push(format!(
            "{}:{}: {}\n  ran:      {ran_as}\n  {why}\n  bound:    {}",
            self.page,
            command.at,
            command.line,
            self.bindings.describe()
        ));
    }
}

#[test]
fn an_inline_comment_is_prose_unless_it_starts_with_exit_or_a_verdict() {
    assert_eq!(inline_expectation("holder, token, time left"), None);
    assert_eq!(inline_expectation("validates the token"), None);
    assert_eq!(
        inline_expectation("valid: ok   (what a protected system asks)"),
        Some((None, "valid: ok".into()))
    );
    assert_eq!(
        inline_expectation("exit 1: not granted: resource_unavailable"),
        Some((Some(1), "not granted: resource_unavailable".into()))
    );
}

#[test]
fn an_output_line_drops_its_exit_code_and_remark() {
    assert_eq!(
        output_line(" not granted: wait_timeout (queue position 2)      exit 1"),
        (
            "not granted: wait_timeout (queue position 2)".into(),
            Some(1)
        )
    );
    assert_eq!(
        output_line("   r  holder a  fencing_token 1187  …      (the current holders)"),
        ("r  holder a  fencing_token 1187  …".into(), None)
    );
}

#[test]
fn a_line_of_ellipsis_stands_for_any_lines() {
    let expected: Vec<Vec<Seg>> = ["r (ad hoc) 1 lease", "…", "read at revision …"]
        .iter()
        .map(|l| segments(l))
        .collect();
    let actual: Vec<Vec<char>> = ["r (ad hoc) 1 lease", "policy: …", "x", "read at revision 9"]
        .iter()
        .map(|l| l.chars().collect())
        .collect();
    assert!(match_lines(&expected, &actual, &Bindings::default()).is_some());
    assert!(match_lines(&expected, &actual[..3], &Bindings::default()).is_none());
}

#[test]
fn a_page_value_binds_once_then_is_required_and_substituted() {
    let b = Bindings::default();
    let line: Vec<char> =
        "granted match/8841 holder a fencing_token 4 lease_id lse_4_0 ttl 30s expires in 29s 998ms"
            .chars()
            .collect();
    let pattern =
        inline_segments("granted, fencing_token 1187 lease_id lse_1187_0, expires in 30s");
    let b = match_segs(&pattern, &line, &b).expect("matches");
    assert_eq!(
        b.substitute("tenure renew match/8841 --token 1187"),
        Ok("tenure renew match/8841 --token 4".into())
    );
    let other: Vec<char> = "granted fencing_token 4".chars().collect();
    assert!(
        match_segs(&inline_segments("granted, fencing_token 1302"), &other, &b).is_none(),
        "two page numbers, one value"
    );
    let longer: Vec<char> = "granted fencing_token 41".chars().collect();
    assert!(
        match_segs(&inline_segments("granted, fencing_token 1187"), &longer, &b).is_none(),
        "a bound number is the whole number"
    );
    assert!(b.substitute("tenure validate r --token N").is_err());
}

/// The route each `curl` command the guide test runs on `page` calls: its method (`-X`, else
/// `POST` with `-d`, else `GET`) and its URL's path.
fn curl_routes(page: &str) -> Vec<(http::Method, String)> {
    parse("docs/api-guide.md", page)
        .into_iter()
        .filter_map(|step| match step {
            Step::Run(command) if program(&command.line).is_some_and(|p| p == "curl") => {
                Some(command.line)
            }
            _ => None,
        })
        .map(|line| {
            let words = shell_words(&line);
            let flag = |name: &str| {
                words
                    .iter()
                    .position(|w| w == name)
                    .and_then(|at| words.get(at + 1))
            };
            let method = match (flag("-X"), flag("-d")) {
                (Some(method), _) => method.parse().expect("a method"),
                (None, Some(_)) => http::Method::POST,
                (None, None) => http::Method::GET,
            };
            let url = words
                .iter()
                .find(|w| w.starts_with("$TENURE_HTTP"))
                .unwrap_or_else(|| panic!("`{line}` calls no $TENURE_HTTP URL"));
            let path = url["$TENURE_HTTP".len()..].split('?').next().unwrap_or("");
            (method, path.to_string())
        })
        .collect()
}

#[test]
fn the_api_guide_has_a_curl_example_for_every_route() {
    use tenure_node::gateway::routes::{find, ROUTES};
    let guide = include_str!("../../docs/api-guide.md");
    let mut called = HashSet::new();
    for (method, path) in curl_routes(guide) {
        if path == "/v1/openapi.json" {
            continue;
        }
        match find(&method, &path) {
            Ok(found) => {
                called.insert((found.route.method.clone(), found.route.path));
            }
            Err(e) => panic!("the guide calls {method} {path}, which no route takes: {e:?}"),
        }
    }
    let missed: Vec<String> = ROUTES
        .iter()
        .filter(|route| !called.contains(&(route.method.clone(), route.path)))
        .map(|route| format!("{} {}", route.method, route.path))
        .collect();
    assert!(
        missed.is_empty(),
        "routes with no curl example in docs/api-guide.md: {missed:?}"
    );
}
