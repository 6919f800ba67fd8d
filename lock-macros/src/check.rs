//! The checks of the attribute's arguments against the function they are
//! on: each key's placeholders against its parameters, and the options
//! against its signature. Above `attr`, `key` and `sig`, which parse each
//! side on its own.

use syn::spanned::Spanned;
use syn::{FnArg, Ident, Pat, ReturnType, Signature};

use crate::Errors;
use crate::attr::{Args, Busy, Kind};
use crate::key::Template;
use crate::sig::{Params, ok_type, skippable};

/// Resolves every placeholder of `templates` against the function's
/// parameters.
pub(crate) fn keys(templates: &[Template], params: &Params, fn_name: &Ident) -> syn::Result<()> {
    let mut errors = Errors::default();
    for template in templates {
        for placeholder in template.placeholders() {
            let root = &placeholder.root;
            let text = &placeholder.text;
            let message = if root == "self" {
                if params.has_self {
                    continue;
                }
                format!(
                    "placeholder `<{text}>` names `self`, but `{fn_name}` has no `self` \
                     parameter; {}",
                    params.describe()
                )
            } else if params.names.iter().any(|name| name == root) {
                continue;
            } else if params.in_patterns.iter().any(|name| name == root) {
                format!(
                    "placeholder `<{text}>` names `{root}`, which is bound inside a pattern \
                     parameter of `{fn_name}`; placeholders name whole parameters: bind the \
                     parameter to a name (e.g. `order: Order`) and write `<order.{root}>`"
                )
            } else {
                format!(
                    "unknown placeholder `<{text}>`: `{root}` is not a parameter of \
                     `{fn_name}`; {}",
                    params.describe()
                )
            };
            errors.push(syn::Error::new(template.lit.span(), message));
        }
    }
    errors.finish()
}

/// The checks of options against the function: `on_busy = "skip"` needs an
/// `Ok` type of `()` or `Option<_>`; `fallback` needs parameters bound to
/// plain names (it is called with them); `hold_at_least` needs one key of a
/// reentrant or fair lock, and no shorter `lease`.
pub(crate) fn options(args: &Args, sig: &Signature) -> syn::Result<()> {
    let mut errors = crate::Errors::default();
    if let Busy::Skip { span } = &args.busy
        && let ReturnType::Type(_, ty) = &sig.output
        && let Some(ok) = ok_type(ty)
        && !skippable(ok)
    {
        let mut error = syn::Error::new(
            ok.span(),
            "`on_busy = \"skip\"` returns `Ok(())` or `Ok(None)` when the lock is busy, so \
             the function must return `Result<(), E>` or `Result<Option<T>, E>`; wrap this \
             type in `Option`, or use `fallback = path` to compute a value instead",
        );
        error.combine(syn::Error::new(*span, "the call is skipped here"));
        errors.push(error);
    }
    if let Busy::Fallback(path) = &args.busy {
        for input in &sig.inputs {
            if let FnArg::Typed(typed) = input
                && !matches!(&*typed.pat, Pat::Ident(_))
            {
                errors.push(syn::Error::new(
                    path.span(),
                    "`fallback` is called with the function's arguments, so every parameter \
                     needs a plain name: bind the destructured parameter to a name \
                     (`point: Point`) and destructure it in the body",
                ));
                break;
            }
        }
    }
    if let Some((_, span)) = args.hold_at_least {
        if args.keys.len() > 1 {
            errors.push(syn::Error::new(
                span,
                "`hold_at_least` works with one key (`key = \"...\"`), not a multi lock",
            ));
        }
        if matches!(args.kind, Kind::Read | Kind::Write) {
            errors.push(syn::Error::new(
                span,
                "`hold_at_least` works with reentrant and fair locks and semaphores, not read or \
                 write locks",
            ));
        }
        if let (Some((minimum, _)), Some(lease)) = (args.hold_at_least, args.lease)
            && minimum > lease
        {
            errors.push(syn::Error::new(
                span,
                "`hold_at_least` is longer than `lease`, which ends the hold first: make \
                 `lease` at least as long, or leave `lease` out (the watchdog then keeps the \
                 lock until the minimum)",
            ));
        }
    }
    errors.finish()
}
