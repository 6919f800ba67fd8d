//! The attribute's arguments, parsed into [`Args`].
//!
//! Every option is `name = value`. Values are parsed as expressions first, so
//! that a value of the wrong form (`wait = 2`) gets a message about that
//! option instead of a bare syntax error, and one build reports every bad
//! option at once.

use std::time::Duration;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprArray, ExprLit, Ident, Lit, LitStr, Path, Token};

use crate::Errors;
use crate::key::Template;

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(keys);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(kind);
    syn::custom_keyword!(permits);
    syn::custom_keyword!(on_lost);
    syn::custom_keyword!(on_busy);
    syn::custom_keyword!(fallback);
    syn::custom_keyword!(hold_at_least);
    syn::custom_keyword!(client);
}

/// The options listed in messages, in the order the docs give them.
const OPTIONS: &str = "`key`, `keys`, `wait`, `lease`, `kind`, `permits`, `on_lost`, \
                       `on_busy`, `fallback`, `hold_at_least`, `client`, `crate`";

/// The checked arguments of one `#[distributed_lock(...)]`.
pub(crate) struct Args {
    /// `key = "..."` (one) or `keys = [...]` (a multi lock); never empty.
    pub(crate) keys: Vec<Template>,
    /// `wait`: `None` waits until acquired; zero makes one attempt.
    pub(crate) wait: Option<Duration>,
    /// `lease`: `None` lets the watchdog renew; never under 1 ms.
    pub(crate) lease: Option<Duration>,
    /// `kind`.
    pub(crate) kind: Kind,
    /// `on_lost`.
    pub(crate) on_lost: OnLost,
    /// `crate = "path"`: where the runtime is; `None` is `::lock_runtime`.
    pub(crate) krate: Option<Path>,
    /// What a busy lock does: `on_busy` or `fallback`.
    pub(crate) busy: Busy,
    /// `hold_at_least`: the lock stays taken at least this long; and the
    /// option's span.
    pub(crate) hold_at_least: Option<(Duration, Span)>,
    /// `client = expr`: the `LockClient` to use; `None` is the global one.
    pub(crate) client: Option<Expr>,
}

/// What happens when the lock is still busy when the wait ends.
pub(crate) enum Busy {
    /// `on_busy = "error"`, the default: `LockError::Timeout`.
    Error,
    /// `on_busy = "skip"`: `Ok(())` / `Ok(None)`, the body not run. `span`:
    /// the value's, for errors about it.
    Skip { span: Span },
    /// `fallback = path`: `path` is called with the same arguments.
    Fallback(Path),
}

/// `kind = "..."`, or `permits = N` (a semaphore of N permits).
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Reentrant,
    Fair,
    Read,
    Write,
    Semaphore(u32),
}

/// `on_lost = "..."`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnLost {
    /// The default: the body runs to its end; a lost lease turns its success
    /// into `Err(LockError::Lost)` at release.
    Finish,
    /// `"cancel"`: the body's future is dropped as soon as the lease is lost.
    Cancel,
}

/// The arguments, with the errors found in options that parsed as syntax
/// but hold bad values. The good keys are kept, so that the function's
/// parameters are checked against them in the same build.
pub(crate) struct Parsed {
    pub(crate) args: Args,
    errors: Errors,
}

impl Parsed {
    /// The arguments if every option was right.
    pub(crate) fn into_args(self) -> syn::Result<Args> {
        self.errors.finish()?;
        Ok(self.args)
    }
}

impl Parse for Parsed {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut errors = Errors::default();
        let mut seen: Vec<String> = Vec::new();
        // Which of `key` / `keys` was given, and its templates.
        let mut keys: Option<(&str, Vec<Template>)> = None;
        let mut args = Args {
            keys: Vec::new(),
            wait: None,
            lease: None,
            kind: Kind::Reentrant,
            on_lost: OnLost::Finish,
            krate: None,
            busy: Busy::Error,
            hold_at_least: None,
            client: None,
        };
        // Where `fallback` was given, and whether `on_busy` was "skip", for
        // the error when both are given.
        let mut fallback_span = None;
        let mut on_busy = None;
        // Where `kind` and `permits` were given: a semaphore has no kind.
        let (mut kind_span, mut permits_span) = (None, None);
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            let (name, span): (&str, Span) = if lookahead.peek(kw::key) {
                ("key", input.parse::<kw::key>()?.span)
            } else if lookahead.peek(kw::keys) {
                ("keys", input.parse::<kw::keys>()?.span)
            } else if lookahead.peek(kw::wait) {
                ("wait", input.parse::<kw::wait>()?.span)
            } else if lookahead.peek(kw::lease) {
                ("lease", input.parse::<kw::lease>()?.span)
            } else if lookahead.peek(kw::kind) {
                ("kind", input.parse::<kw::kind>()?.span)
            } else if lookahead.peek(kw::permits) {
                ("permits", input.parse::<kw::permits>()?.span)
            } else if lookahead.peek(kw::on_lost) {
                ("on_lost", input.parse::<kw::on_lost>()?.span)
            } else if lookahead.peek(kw::on_busy) {
                ("on_busy", input.parse::<kw::on_busy>()?.span)
            } else if lookahead.peek(kw::fallback) {
                ("fallback", input.parse::<kw::fallback>()?.span)
            } else if lookahead.peek(kw::hold_at_least) {
                ("hold_at_least", input.parse::<kw::hold_at_least>()?.span)
            } else if lookahead.peek(kw::client) {
                ("client", input.parse::<kw::client>()?.span)
            } else if lookahead.peek(Token![crate]) {
                ("crate", input.parse::<Token![crate]>()?.span)
            } else if input.peek(Ident::peek_any) {
                let unknown = input.call(Ident::parse_any)?;
                errors.push(unknown_option(&unknown));
                if input.parse::<Option<Token![=]>>()?.is_some() {
                    input.parse::<Expr>()?;
                }
                if !input.is_empty() {
                    input.parse::<Token![,]>()?;
                }
                continue;
            } else if input.peek(LitStr) {
                return Err(input.error(format!(
                    "options are named: write `key = \"...\"`; the options are {OPTIONS}"
                )));
            } else {
                return Err(lookahead.error());
            };
            if !input.peek(Token![=]) {
                return Err(syn::Error::new(
                    span,
                    format!("`{name}` needs a value: `{name} = {}`", example(name)),
                ));
            }
            input.parse::<Token![=]>()?;
            let value: Expr = input.parse()?;
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }

            if seen.iter().any(|s| s == name) {
                errors.push(syn::Error::new(
                    span,
                    format!("`{name}` is given twice: keep one"),
                ));
                continue;
            }
            seen.push(name.to_owned());
            let parsed = match name {
                "key" | "keys" => parse_keys(name, &value).map(|templates| {
                    if let Some((other, _)) = keys {
                        errors.push(syn::Error::new(
                            span,
                            format!(
                                "`{name}` and `{other}` are both given: use `key = \"...\"` \
                                 for one lock, or put every key in `keys = [...]` for a \
                                 multi lock"
                            ),
                        ));
                    } else {
                        keys = Some((name, templates));
                    }
                }),
                "wait" => parse_duration(name, &value).map(|d| args.wait = Some(d)),
                "lease" => parse_lease(&value).map(|d| args.lease = Some(d)),
                "kind" => parse_kind(&value).map(|k| {
                    kind_span = Some(span);
                    if permits_span.is_none() {
                        args.kind = k;
                    }
                }),
                "permits" => parse_permits(&value).map(|n| {
                    permits_span = Some(span);
                    args.kind = Kind::Semaphore(n);
                }),
                "on_lost" => parse_on_lost(&value).map(|o| args.on_lost = o),
                "on_busy" => parse_on_busy(&value).map(|(skip, span)| {
                    on_busy = Some(skip);
                    if skip {
                        args.busy = Busy::Skip { span };
                    }
                }),
                "fallback" => parse_fallback(&value).map(|path| {
                    fallback_span = Some(span);
                    args.busy = Busy::Fallback(path);
                }),
                "hold_at_least" => {
                    parse_duration(name, &value).map(|d| args.hold_at_least = Some((d, span)))
                }
                "client" => {
                    args.client = Some(value.clone());
                    Ok(())
                }
                _ => parse_crate(&value).map(|p| args.krate = Some(p)),
            };
            if let Err(e) = parsed {
                errors.push(e);
            }
        }
        if let (Some(kind), Some(_)) = (kind_span, permits_span) {
            errors.push(syn::Error::new(
                kind,
                "`kind` and `permits` are both given: `permits = N` makes a semaphore (at most \
                 N holders at once), which has no other kind; remove `kind`, or remove \
                 `permits` for a lock of that kind",
            ));
        }
        match (fallback_span, on_busy) {
            (Some(fallback), Some(true)) => errors.push(syn::Error::new(
                fallback,
                "`fallback` and `on_busy = \"skip\"` are both given: a busy lock either skips \
                 the call or calls the fallback; keep one",
            )),
            (Some(fallback), Some(false)) => errors.push(syn::Error::new(
                fallback,
                "`fallback` and `on_busy = \"error\"` are both given: a busy lock either returns \
                 `LockError::Timeout` or calls the fallback; keep one",
            )),
            _ => {}
        }
        match keys {
            Some((_, templates)) => args.keys = templates,
            // Only when `key` was not given at all: a bad `key` has its own error.
            None if !seen.iter().any(|s| s == "key" || s == "keys") => {
                errors.push(syn::Error::new(
                    Span::call_site(),
                    "missing `key`: name the lock, e.g. \
                     `#[distributed_lock(key = \"stock:<id>\")]`, where `<id>` is a parameter",
                ));
            }
            None => {}
        }
        Ok(Parsed { args, errors })
    }
}

/// An example value for each option, for messages.
fn example(name: &str) -> &'static str {
    match name {
        "key" => "\"stock:<id>\"",
        "keys" => "[\"stock:<id>\", \"order:<order.id>\"]",
        "wait" => "\"2s\"",
        "lease" => "\"10s\"",
        "kind" => "\"fair\"",
        "permits" => "5",
        "on_lost" => "\"cancel\"",
        "on_busy" => "\"skip\"",
        "fallback" => "busy_path",
        "hold_at_least" => "\"30s\"",
        "client" => "self.locks",
        _ => "\"lock_runtime\"",
    }
}

fn unknown_option(name: &Ident) -> syn::Error {
    let hint = match name.to_string().as_str() {
        "timeout" | "wait_time" | "wait_for" => " (did you mean `wait`?)",
        "ttl" | "lease_time" | "expire" | "expiry" => " (did you mean `lease`?)",
        "name" | "lock" => " (did you mean `key`?)",
        "fair" | "read" | "write" | "reentrant" => " (the lock kind is `kind = \"...\"`)",
        "semaphore" | "max_holders" | "limit" | "concurrency" => {
            " (a semaphore of N holders is `permits = N`)"
        }
        _ => "",
    };
    syn::Error::new(
        name.span(),
        format!("unknown option `{name}`{hint}; the options are {OPTIONS}"),
    )
}

/// The string literal of `name = "..."`.
fn string<'a>(name: &str, value: &'a Expr) -> syn::Result<&'a LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit),
        _ => Err(syn::Error::new_spanned(
            value,
            format!(
                "`{name}` takes a string literal: `{name} = {}`",
                example(name)
            ),
        )),
    }
}

fn parse_keys(name: &str, value: &Expr) -> syn::Result<Vec<Template>> {
    if name == "key" {
        return Ok(vec![Template::parse(string(name, value)?.clone())?]);
    }
    let Expr::Array(ExprArray { elems, .. }) = value else {
        return Err(syn::Error::new_spanned(
            value,
            format!(
                "`keys` takes a list of key strings: `keys = {}`",
                example("keys")
            ),
        ));
    };
    if elems.is_empty() {
        return Err(syn::Error::new_spanned(
            value,
            format!(
                "`keys` is empty: list at least one key, e.g. `keys = {}`",
                example("keys")
            ),
        ));
    }
    let mut errors = Errors::default();
    let mut templates: Vec<Template> = Vec::new();
    for elem in elems {
        let template = string("keys", elem).and_then(|lit| Template::parse(lit.clone()));
        match template {
            Ok(t)
                if templates
                    .iter()
                    .any(|seen| seen.lit.value() == t.lit.value()) =>
            {
                errors.push(syn::Error::new(
                    t.lit.span(),
                    format!(
                        "key \"{}\" is listed twice in `keys`: remove the repeat",
                        t.lit.value()
                    ),
                ));
            }
            Ok(t) => templates.push(t),
            Err(e) => errors.push(e),
        }
    }
    errors.finish()?;
    Ok(templates)
}

fn parse_duration(name: &str, value: &Expr) -> syn::Result<Duration> {
    let lit = string(name, value)?;
    humantime::parse_duration(lit.value().trim()).map_err(|e| {
        syn::Error::new(
            lit.span(),
            format!(
                "bad duration {:?} for `{name}`: {e}; write a number with a unit, \
                 e.g. \"250ms\", \"2s\", \"1m30s\"",
                lit.value()
            ),
        )
    })
}

fn parse_lease(value: &Expr) -> syn::Result<Duration> {
    let lease = parse_duration("lease", value)?;
    if lease < Duration::from_millis(1) {
        return Err(syn::Error::new_spanned(
            value,
            "`lease` must be at least 1ms: Redis counts leases in milliseconds, and a \
             shorter lease expires before the body runs; leave `lease` out to let the \
             watchdog keep the lock until the function returns",
        ));
    }
    Ok(lease)
}

fn parse_kind(value: &Expr) -> syn::Result<Kind> {
    let lit = string("kind", value)?;
    match lit.value().as_str() {
        "reentrant" => Ok(Kind::Reentrant),
        "fair" => Ok(Kind::Fair),
        "read" => Ok(Kind::Read),
        "write" => Ok(Kind::Write),
        other => Err(syn::Error::new(
            lit.span(),
            format!(
                "unknown lock kind {other:?}: `kind` is one of \"reentrant\" (the default), \
                 \"fair\", \"read\", \"write\""
            ),
        )),
    }
}

/// `permits = N`: a whole number above zero that fits in `u32`.
fn parse_permits(value: &Expr) -> syn::Result<u32> {
    let Expr::Lit(ExprLit {
        lit: Lit::Int(lit), ..
    }) = value
    else {
        return Err(syn::Error::new_spanned(
            value,
            "`permits` takes an integer literal (the bound is fixed at compile time), e.g. \
             `permits = 5`; for a bound known only at run time, use \
             `client.semaphore(name, n)`",
        ));
    };
    match lit.base10_parse::<u32>() {
        Ok(0) => Err(syn::Error::new(
            lit.span(),
            "`permits = 0` is a semaphore nobody could ever hold: write a count above zero, \
             e.g. `permits = 5`",
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(syn::Error::new(
            lit.span(),
            "`permits` takes a whole number that fits in `u32`, e.g. `permits = 5`",
        )),
    }
}

fn parse_on_lost(value: &Expr) -> syn::Result<OnLost> {
    let lit = string("on_lost", value)?;
    match lit.value().as_str() {
        "cancel" => Ok(OnLost::Cancel),
        other => Err(syn::Error::new(
            lit.span(),
            format!(
                "unknown `on_lost` value {other:?}: the only value is \"cancel\" (drop the \
                 body when the lease is lost); leave `on_lost` out to let the body finish \
                 and report the loss when it returns"
            ),
        )),
    }
}

/// Whether the value is `"skip"` (else `"error"`), and its span.
fn parse_on_busy(value: &Expr) -> syn::Result<(bool, Span)> {
    let lit = string("on_busy", value)?;
    match lit.value().as_str() {
        "skip" => Ok((true, lit.span())),
        "error" => Ok((false, lit.span())),
        other => Err(syn::Error::new(
            lit.span(),
            format!(
                "unknown `on_busy` value {other:?}: write \"skip\" (a busy lock skips the call, \
                 returning `Ok(())` or `Ok(None)`) or \"error\" (the default: \
                 `LockError::Timeout`); to run other code instead, use `fallback = path`"
            ),
        )),
    }
}

fn parse_fallback(value: &Expr) -> syn::Result<Path> {
    match value {
        Expr::Path(path) if path.qself.is_none() => Ok(path.path.clone()),
        _ => Err(syn::Error::new_spanned(
            value,
            "`fallback` takes the path of a function called with the same arguments when the \
             lock is busy, e.g. `fallback = busy_path` or `fallback = Self::busy_path`",
        )),
    }
}

fn parse_crate(value: &Expr) -> syn::Result<Path> {
    let lit = string("crate", value)?;
    lit.parse::<Path>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`crate` takes the path of the lock-runtime crate, e.g. \
                 `crate = \"lock_runtime\"` or the name you renamed it to; {:?} is not a path",
                lit.value()
            ),
        )
    })
}
