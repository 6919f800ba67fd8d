//! The function the attribute goes on: its shape (`async`, returns a
//! `Result`) and the parameter names a key may use.

use proc_macro2::Span;
use syn::visit_mut::{self, VisitMut};
use syn::{
    FnArg, GenericArgument, Ident, Pat, PathArguments, PathSegment, ReturnType, Signature, Type,
};

/// What the function offers to key placeholders.
pub(crate) struct Params {
    /// A `self` receiver (`self`, `&self`, `&mut self`, `self: Box<Self>`...).
    pub(crate) has_self: bool,
    /// Parameters bound to a plain name (`id: u64`, `mut order: Order`).
    pub(crate) names: Vec<Ident>,
    /// Names bound inside destructuring parameters (`Point { x, y }: Point`):
    /// not usable, listed for a precise error.
    pub(crate) in_patterns: Vec<Ident>,
}

impl Params {
    /// The parameter names of `sig`.
    pub(crate) fn of(sig: &Signature) -> Self {
        let mut params = Params {
            has_self: false,
            names: Vec::new(),
            in_patterns: Vec::new(),
        };
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(_) => params.has_self = true,
                FnArg::Typed(typed) => match &*typed.pat {
                    Pat::Ident(pat) => params.names.push(pat.ident.clone()),
                    pattern => bindings(pattern, &mut params.in_patterns),
                },
            }
        }
        params
    }

    /// "its parameters are `self`, `id`" for error messages.
    pub(crate) fn describe(&self) -> String {
        let names: Vec<String> = self
            .has_self
            .then(|| "self".to_owned())
            .into_iter()
            .chain(self.names.iter().map(Ident::to_string))
            .map(|name| format!("`<{name}>`"))
            .collect();
        if names.is_empty() {
            "the function has no parameters to put in the key: add the parameter, or write \
             the name as fixed text"
                .into()
        } else {
            format!("the placeholders it can use are {}", names.join(", "))
        }
    }
}

/// Collects the names a destructuring pattern binds.
fn bindings(pat: &Pat, out: &mut Vec<Ident>) {
    match pat {
        Pat::Ident(pat) => {
            out.push(pat.ident.clone());
            if let Some((_, sub)) = &pat.subpat {
                bindings(sub, out);
            }
        }
        Pat::Paren(pat) => bindings(&pat.pat, out),
        Pat::Reference(pat) => bindings(&pat.pat, out),
        Pat::Slice(pat) => pat.elems.iter().for_each(|p| bindings(p, out)),
        Pat::Struct(pat) => pat.fields.iter().for_each(|f| bindings(&f.pat, out)),
        Pat::Tuple(pat) => pat.elems.iter().for_each(|p| bindings(p, out)),
        Pat::TupleStruct(pat) => pat.elems.iter().for_each(|p| bindings(p, out)),
        Pat::Type(pat) => bindings(&pat.pat, out),
        _ => {}
    }
}

/// Checks that `sig` is an `async fn` returning a `Result`, and gives the
/// return type as the expansion names it in the turbofish on `run`.
pub(crate) fn check(sig: &Signature) -> syn::Result<Type> {
    let asyncness = match sig.asyncness {
        Some(_) => Ok(()),
        None => Err(syn::Error::new(
            sig.fn_token.span,
            "#[distributed_lock] needs an `async fn`: the lock is held while the body \
             awaits; write `async fn`",
        )),
    };
    let name = &sig.ident;
    let fix = "a #[distributed_lock] function returns `Result<T, E>` with \
               `E: From<lock_runtime::LockError>`, so that a lock that cannot be taken \
               comes back as an error";
    let ret = match &sig.output {
        ReturnType::Default => Err(syn::Error::new(
            name.span(),
            format!("`{name}` returns `()`, but {fix}; write e.g. `-> Result<(), MyError>`"),
        )),
        ReturnType::Type(_, ty) if !is_result(ty) => Err(syn::Error::new_spanned(
            ty,
            format!(
                "`{name}` does not return a `Result`, but {fix}; wrap the return type, \
                 e.g. `-> Result<T, MyError>`"
            ),
        )),
        ReturnType::Type(_, ty) => Ok(turbofish_type(ty)),
    };
    let ((), ret) = crate::both(asyncness, ret)?;
    Ok(ret)
}

/// `ty` without the parentheses and invisible groups around it.
fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => peel(&group.elem),
        Type::Paren(paren) => peel(&paren.elem),
        _ => ty,
    }
}

/// The last segment of a path type (`Result` of `std::io::Result<T>`).
fn last_segment(ty: &Type) -> Option<&PathSegment> {
    match peel(ty) {
        Type::Path(path) => path.path.segments.last(),
        _ => None,
    }
}

/// The `T` of a `Result<T, E>` (or of an alias `Result<T>`), when written.
pub(crate) fn ok_type(ty: &Type) -> Option<&Type> {
    let PathArguments::AngleBracketed(args) = &last_segment(ty)?.arguments else {
        return None;
    };
    args.args.iter().find_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    })
}

/// `()` or `Option<_>` (any path ending in `Option`).
pub(crate) fn skippable(ty: &Type) -> bool {
    matches!(peel(ty), Type::Tuple(tuple) if tuple.elems.is_empty())
        || last_segment(ty).is_some_and(|segment| segment.ident == "Option")
}

/// Whether the type is syntactically a `Result`: its path's last segment is
/// `Result` (`std::io::Result<T>` and `anyhow::Result<T>` aliases included).
/// Whether the error type takes a `LockError` is the compiler's check.
fn is_result(ty: &Type) -> bool {
    last_segment(ty).is_some_and(|segment| segment.ident == "Result")
}

/// The return type as a turbofish argument: `impl Trait` (allowed in return
/// position only) becomes `_`, which the body's value then decides.
fn turbofish_type(ty: &Type) -> Type {
    struct InferImplTrait;
    impl VisitMut for InferImplTrait {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(_) = ty {
                *ty = Type::Infer(syn::TypeInfer {
                    underscore_token: syn::Token![_](Span::call_site()),
                });
            } else {
                visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    let mut ty = ty.clone();
    InferImplTrait.visit_type_mut(&mut ty);
    ty
}
