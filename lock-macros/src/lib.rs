//! The `#[distributed_lock]` attribute of `lock-runtime`.
//!
//! Use it through `lock_runtime`, which re-exports it: a project depends on
//! `lock-runtime` alone. This crate only parses, checks and expands; the
//! lock itself is `lock_runtime::__private::{take, run}`.
//!
//! ```ignore
//! use lock_runtime::{distributed_lock, LockError};
//!
//! #[distributed_lock(key = "order:<order.id>:<user_id>", wait = "2s")]
//! async fn pay(order: &Order, user_id: u64) -> Result<Receipt, ShopError> {
//!     // runs while this process holds the lock `order:<id>:<user id>`
//! }
//! ```
//!
//! # Options
//!
//! | option | value | default |
//! | --- | --- | --- |
//! | `key` | key template, e.g. `"stock:<id>"` | required, unless `keys` |
//! | `keys` | list of key templates, e.g. `["a:<x>", "b:<y>"]`: a multi lock (all or none) | |
//! | `wait` | duration text: `"250ms"`, `"2s"`, `"1m30s"`, `"0s"` (one attempt) | wait until acquired |
//! | `lease` | duration text, at least `"1ms"`: a fixed lease, never renewed | the watchdog renews |
//! | `kind` | `"reentrant"`, `"fair"`, `"read"`, `"write"` | `"reentrant"` |
//! | `permits` | an integer above 0: a semaphore, at most that many holders at once (not with `kind`) | a lock |
//! | `on_lost` | `"cancel"`: drop the body when the lease is lost | the body finishes |
//! | `on_busy` | `"skip"`: a lock still busy after `wait` returns `Ok(())` / `Ok(None)`; `"error"` | `"error"`: `LockError::Timeout` |
//! | `fallback` | path of a function called with the same arguments when the lock is busy | |
//! | `hold_at_least` | duration text: the lock stays taken this long after it was taken | freed at release |
//! | `client` | an expression giving a `LockClient` (`&`, `Arc` too), e.g. `self.locks` | the global client |
//! | `crate` | path of the runtime crate, e.g. `"my_locks"` | `::lock_runtime` |
//!
//! Durations are parsed at compile time with `humantime`'s syntax.
//!
//! # Key templates
//!
//! Literal text with placeholders: `<param>` is a parameter of the function
//! (`<self>` in a method), `<param.field.path>` a field reached from it
//! (names or tuple indexes, through references as `.` does). A placeholder's
//! value must be `Display`; it is formatted into the key when the function
//! is called.
//!
//! # Checks
//!
//! Each mistake is a compile error on the token at fault (the key literal,
//! the option's name or value, the `fn` keyword, the return type), with a
//! message saying how to fix it:
//!
//! - in a key: an unknown placeholder (the message lists the usable ones), a
//!   placeholder whose value is not `Display`, an empty (`<>`), unterminated
//!   (`<id`) or malformed (`<a b>`, `<id()>`) placeholder, a stray `>`, an
//!   empty key, a `{` or `}`, a placeholder naming a name bound inside a
//!   destructuring parameter, `<self>` outside a method;
//! - in the options: an unknown or repeated option, a value of the wrong
//!   form, a bad duration, a bad `kind`, `on_lost` or `on_busy`,
//!   `permits = 0`, `permits` that is not an integer literal or too large
//!   for `u32`, `permits` with `kind`, no `key`,
//!   both `key` and `keys`, an empty `keys`, the same key twice in `keys`, a
//!   `lease` under 1 ms, `fallback` that is not a path or comes with
//!   `on_busy`, `hold_at_least` on a multi, read or write lock or
//!   over a fixed `lease`;
//! - on the function: not `async`, no return type, a return type that is not
//!   a `Result`, an error type without `From<LockError>`, `on_busy = "skip"`
//!   on an `Ok` type other than `()` or `Option<_>`, a `fallback` whose
//!   signature does not take the function's arguments (reported on the
//!   path), a `client` that is not a `LockClient`.
//!
//! Errors do not stop at the first: one build reports every bad option and
//! key. With any error the function is still emitted unchanged next to the
//! errors, so rust-analyzer keeps working on its body.
//!
//! # Decisions
//!
//! - **Return type.** The check is syntactic: the return type's last path
//!   segment must be `Result`, so aliases such as `io::Result<T>` or
//!   `type Result<T> = std::result::Result<T, MyError>` pass, and the
//!   compiler then checks that the error type is `From<LockError>`.
//! - **Signature.** The function keeps its attributes, visibility and
//!   signature exactly; only the body changes. The body runs in an
//!   `async move` block, so `return` and `?` inside it end the block and the
//!   lock is still released.
//! - **Keys are evaluated first.** The keys are formatted before the lock is
//!   taken, borrowing the parameters only for that.
//! - **Placeholders name parameters.** A name bound inside a destructuring
//!   parameter (`Point { x, y }: Point`) is refused: bind the parameter to a
//!   name and write `<point.x>`. Method calls and indexing are refused too: a
//!   key stays a plain description of which data it protects.
//! - **Braces and angle brackets.** `{` and `}` cannot appear in a key: the
//!   lock's derived keys wrap its name in `{...}` as a Redis Cluster hash
//!   tag. `<` and `>` only delimit placeholders; there is no escape.
//! - **`on_lost`.** The only value is `"cancel"`. Left out, the body runs to
//!   its end and a lease lost meanwhile turns its success into
//!   `Err(LockError::Lost)`; there is no value that ignores a loss.
//! - **`lease`** under 1 ms is refused (Redis counts in milliseconds).
//!   `wait = "0s"` is allowed and means one attempt.
//! - **`keys`** with one entry is the same as `key`; a key listed twice is
//!   refused (it could only deadlock or re-enter itself). Two different
//!   templates that format to the same name at run time are the runtime's
//!   concern.
//! - **`crate`** takes a string, as in `tokio::main`.
//! - **Busy paths.** "Busy" is exactly `LockError::Timeout`: the lock was
//!   not taken within `wait`. With `on_busy = "skip"` or `fallback` and no
//!   `wait`, one attempt is made (waiting for ever would never be busy).
//!   Any other failure (Redis unreachable, a bad name) is still returned
//!   as the error: neither option is a circuit breaker.
//! - **`fallback`** is awaited: an `async fn` taking the same arguments in
//!   the same order (`self` first in methods) and returning the same type.
//!   Every parameter needs a plain name, since it is passed on. A mismatch
//!   is reported on the path.
//! - **`hold_at_least`** counts from the acquire's answer, so the lock is
//!   held at least that long after the server granted it. The release of
//!   the last hold sets the lock to expire when the minimum ends (a
//!   watchdog lease is lengthened or shortened to it; a fixed lease only
//!   shortened), waking waiters only to tell them of a shorter lease; a
//!   release after the minimum frees at once. A minimum over a fixed `lease` is refused: the lease would end
//!   the hold first.
//! - **`client`** is evaluated when the function is called, before the
//!   body, and borrowed only while the lock is taken: `client = self.locks`
//!   works in `&mut self` methods too.
//! - **Spans.** Generated field accesses of placeholders are located on the
//!   key literal but resolved as the expansion's, so rustc's suggestions
//!   (e.g. for a misspelt field) never rewrite the attribute.

use proc_macro::TokenStream;
use quote::quote;

mod attr;
mod check;
mod expand;
mod key;
mod segmented;
mod sig;

/// Runs an `async fn`'s body while holding a distributed lock on Redis.
///
/// ```ignore
/// use lock_runtime::{distributed_lock, LockError};
///
/// #[derive(Debug)]
/// enum ShopError { Lock(LockError), SoldOut }
/// impl From<LockError> for ShopError {
///     fn from(e: LockError) -> Self { ShopError::Lock(e) }
/// }
///
/// // One caller in the fleet at a time per `id`; give up after 2 s.
/// #[distributed_lock(key = "stock:<id>", wait = "2s")]
/// async fn deduct(id: u64, qty: u32) -> Result<u32, ShopError> {
///     // read-modify-write the stock of `id`
///     Ok(qty)
/// }
///
/// impl Cart {
///     // Placeholders reach fields, `self` included; a fixed 10 s lease.
///     #[distributed_lock(key = "cart:<self.id>:<item.sku>", lease = "10s", wait = "0s")]
///     async fn add(&self, item: &Item) -> Result<(), ShopError> { Ok(()) }
/// }
///
/// // A fair lock: callers get it in arrival order.
/// #[distributed_lock(key = "report:<day>", kind = "fair")]
/// async fn report(day: u32) -> Result<(), ShopError> { Ok(()) }
///
/// // Several keys: all or none (a multi lock).
/// #[distributed_lock(keys = ["account:<from>", "account:<to>"], on_lost = "cancel")]
/// async fn transfer(from: u64, to: u64, cents: u64) -> Result<(), ShopError> { Ok(()) }
///
/// // A scheduled job: one instance runs each slot, the others skip it, and
/// // the lock stays taken 30 s so that late timers skip too.
/// #[distributed_lock(key = "report:<slot>", on_busy = "skip", hold_at_least = "30s")]
/// async fn nightly(slot: u64) -> Result<(), ShopError> { Ok(()) }
///
/// // Busy for 200 ms: serve the cached price instead, on this service's client.
/// #[distributed_lock(key = "price:<id>", wait = "200ms", fallback = cached_price, client = shop_locks())]
/// async fn price(id: u64) -> Result<u64, ShopError> { Ok(100) }
/// async fn cached_price(id: u64) -> Result<u64, ShopError> { Ok(99) }
/// ```
///
/// # Options
///
/// - `key = "text:<param>:<param.field>"` (required, unless `keys`): the
///   lock's name. `<...>` placeholders name the function's parameters
///   (`self` in methods) or fields reached from them; their values must be
///   `Display`. A key cannot contain `{` or `}`, nor `<` or `>` as text.
/// - `keys = ["a:<x>", "b:<y>"]`: several locks taken all or none.
/// - `wait = "2s"`: give up after this long with `LockError::Timeout`.
///   Left out, wait until acquired; `"0s"` makes one attempt.
/// - `lease = "10s"`: a fixed lease, never renewed (at least `"1ms"`). Left
///   out, the client's watchdog keeps the lock until the function returns.
/// - `kind = "reentrant" | "fair" | "read" | "write"` (default
///   `"reentrant"`).
/// - `permits = 5`: a semaphore (`client.semaphore(key, 5)`): at most 5
///   calls hold a permit of the key at once, fleet-wide; each permit is
///   renewed, fenced, told lost and re-entered as a lock is. Not with
///   `kind`; `permits = 0` is refused.
/// - `on_lost = "cancel"`: when the lease is lost, drop the body and return
///   `LockError::Lost`. Left out, the body finishes, and if the lease was
///   lost meanwhile a successful result becomes `Err(LockError::Lost)`.
/// - `on_busy = "skip"`: when the lock is not taken within `wait` (one
///   attempt if `wait` is left out), the body does not run and the function
///   returns `Ok(())` or `Ok(None)`; the `Ok` type must be `()` or
///   `Option<_>`. `on_busy = "error"` is the default: `LockError::Timeout`.
/// - `fallback = path`: when the lock is not taken within `wait` (one
///   attempt if left out), `path(args..).await` is returned instead, with
///   the same arguments (`self` first in methods). Redis failures are still
///   errors. Not together with `on_busy`.
/// - `hold_at_least = "30s"`: the lock stays taken at least this long after
///   it was taken, even when the body returns sooner (ShedLock's
///   `lockAtLeastFor`). Reentrant and fair locks and semaphores, one key.
/// - `client = expr`: lock on this `LockClient` (or `&LockClient`,
///   `Arc<LockClient>`), e.g. `client = self.locks` or
///   `client = shop_locks()`. Left out, the global client.
/// - `crate = "path"`: where `lock_runtime` is, if you renamed it.
///
/// Durations are text such as `"250ms"`, `"2s"`, `"1m30s"`, parsed at
/// compile time.
///
/// # The function
///
/// An `async fn` (free, in an `impl` block, generic or not) returning
/// `Result<T, E>` where `E: From<LockError>`: a lock that cannot be taken,
/// or a lease lost, comes back as that error. The signature stays as
/// written. The body runs in the scope of its hold, so the lock is reentrant
/// along the call chain: a locked function awaited inside the body re-enters
/// the same key, while a call joined beside it (`join!`, `select!`) is
/// another holder and waits. It uses the global client
/// (`lock_runtime::client()`) unless `client = expr` names another.
///
/// Every misuse (unknown placeholder, non-`Display` value, bad option or
/// duration, non-async function, non-`Result` return...) is a compile error
/// pointing at the mistake.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let original = proc_macro2::TokenStream::from(item.clone());
    match lock(args.into(), item.into()) {
        Ok(expanded) => expanded.into(),
        // Keep the function as written, so the IDE still knows it and the
        // only errors are ours.
        Err(errors) => {
            let errors = errors.to_compile_error();
            quote!(#errors #original).into()
        }
    }
}

/// Declares segmented locks once, each a `static` with a typed key template
/// and a segment count, checked at compile time.
///
/// ```ignore
/// lock_runtime::segmented_lock! {
///     /// The stock of one SKU, split in 10 segments.
///     pub static STOCK: (sku: u64) = "stock:<sku>", segments = 10;
/// }
///
/// let guard = STOCK.lock(42).acquire().await?;        // one segment, a free one first
/// let guard = STOCK.segment(42, 3).acquire().await?;  // segment 3
/// let all = STOCK.lock_all(42).acquire().await?;      // every segment, ascending
/// let stock = STOCK.inventory(42, store);             // segmented stock
/// ```
///
/// `STOCK` is of a generated type (`StockSegmentedLock`) whose methods take
/// the declared parameters by type: `name`, `get` (the `SegmentedLock` on the
/// global client), `on(&client, ..)`, `lock`, `segment`, `lock_all`,
/// `inventory`, and the consts `SEGMENTS` and `TEMPLATE`. The key template
/// follows the attribute's rules: `<param>` or `<param.field.path>`
/// placeholders of `Display` values, no `{` or `}`.
///
/// Each mistake is a compile error on the token at fault, saying how to fix
/// it: an unknown placeholder, a declared parameter the key does not use, a
/// bad template, a missing, zero, repeated or non-literal `segments`, an
/// unknown option.
#[proc_macro]
pub fn segmented_lock(input: TokenStream) -> TokenStream {
    match syn::parse::<segmented::Declarations>(input) {
        Ok(declarations) => segmented::expand(&declarations).into(),
        Err(errors) => errors.to_compile_error().into(),
    }
}

/// Parses and checks everything, reporting every error found, then expands.
fn lock(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let Ok(func) = syn::parse2::<syn::ItemFn>(item) else {
        return Err(syn::Error::new(
            proc_macro2::Span::call_site(),
            "#[distributed_lock] goes on an `async fn` with a body, free or in an `impl` block",
        ));
    };
    let parsed = syn::parse2::<attr::Parsed>(args);
    // The keys that parsed are checked even when other options are bad, and
    // the signature always: one build shows every mistake.
    let keys = match &parsed {
        Ok(parsed) => check::keys(
            &parsed.args.keys,
            &sig::Params::of(&func.sig),
            &func.sig.ident,
        ),
        Err(_) => Ok(()),
    };
    let args = parsed
        .and_then(attr::Parsed::into_args)
        .and_then(|args| check::options(&args, &func.sig).map(|()| args));
    let ret = sig::check(&func.sig);
    let (args, (ret, ())) = both(args, both(ret, keys))?;
    Ok(expand::expand(&args, func, &ret))
}

/// Both values, or every error of the two.
fn both<A, B>(a: syn::Result<A>, b: syn::Result<B>) -> syn::Result<(A, B)> {
    match (a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(mut a), Err(b)) => {
            a.combine(b);
            Err(a)
        }
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
    }
}

/// Errors gathered across checks, so that one build shows them all.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}
