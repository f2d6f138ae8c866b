//! A view of an HCL body with `dynamic` blocks expanded.
//!
//! Each attribute remembers the scope (dynamic block iterators) its expression
//! must be evaluated in, so decoding never needs to know about `dynamic`.

use std::cell::Cell;
use std::ops::Range;
use std::rc::Rc;

use hcl_edit::Span;
use hcl_edit::expr::Expression;
use hcl_edit::structure::{self, BlockLabel, Structure};

use crate::error::{DResult, Diag};
use crate::eval::{Context, Scope, iterate};
use crate::value::Value;

/// Dynamic blocks nested deeper than this are rejected rather than risking the stack.
const MAX_NESTING: usize = 128;

/// Upper bound on attributes and blocks after `dynamic` expansion, which
/// could otherwise multiply without limit.
const MAX_ITEMS: usize = 200_000;

pub(crate) struct Attr<'a> {
    pub name: String,
    pub name_span: Option<Range<usize>>,
    pub expr: &'a Expression,
    pub scope: Option<Rc<Scope>>,
}

pub(crate) struct Label {
    pub value: String,
    pub span: Option<Range<usize>>,
}

pub(crate) struct Block<'a> {
    pub ty: String,
    pub ty_span: Option<Range<usize>>,
    pub labels: Vec<Label>,
    pub body: Body<'a>,
}

pub(crate) struct Body<'a> {
    pub attrs: Vec<Attr<'a>>,
    pub blocks: Vec<Block<'a>>,
}

impl Block<'_> {
    /// Where errors about the block as a whole point: its type name.
    pub(crate) fn span(&self) -> Option<Range<usize>> {
        self.ty_span.clone()
    }
}

fn label_of(l: &BlockLabel) -> Label {
    Label {
        value: l.as_str().to_string(),
        span: l.span(),
    }
}

/// Builds the expanded view of `body`.
pub(crate) fn build<'a>(
    ctx: &Context<'_>,
    body: &'a structure::Body,
    scope: &Option<Rc<Scope>>,
) -> DResult<Body<'a>> {
    let items = Cell::new(0);
    Builder { ctx, items: &items }.body(body, scope, 0)
}

struct Builder<'c, 'x> {
    ctx: &'c Context<'x>,
    /// Attributes and blocks produced so far, see [`MAX_ITEMS`].
    items: &'c Cell<usize>,
}

impl Builder<'_, '_> {
    fn count(&self, span: Option<Range<usize>>) -> DResult<()> {
        let n = self.items.get() + 1;
        self.items.set(n);
        if n > MAX_ITEMS {
            return Err(Diag::new(
                span,
                "Too many blocks",
                "Expanding dynamic blocks produces more blocks and arguments than the parser allows.",
            ));
        }
        Ok(())
    }

    fn body<'a>(
        &self,
        body: &'a structure::Body,
        scope: &Option<Rc<Scope>>,
        depth: usize,
    ) -> DResult<Body<'a>> {
        if depth > MAX_NESTING {
            return Err(Diag::new(
                body.span(),
                "Nesting too deep",
                "Blocks are nested too deeply.",
            ));
        }
        let mut out = Body {
            attrs: Vec::new(),
            blocks: Vec::new(),
        };
        for item in body.iter() {
            match item {
                Structure::Attribute(a) => {
                    self.count(a.key.span())?;
                    out.attrs.push(Attr {
                        name: a.key.as_str().to_string(),
                        name_span: a.key.span(),
                        expr: &a.value,
                        scope: scope.clone(),
                    })
                }
                Structure::Block(b) if b.ident.as_str() == "dynamic" => {
                    out.blocks.extend(self.expand_dynamic(b, scope, depth)?);
                }
                Structure::Block(b) => {
                    self.count(b.ident.span())?;
                    out.blocks.push(Block {
                        ty: b.ident.as_str().to_string(),
                        ty_span: b.ident.span(),
                        labels: b.labels.iter().map(label_of).collect(),
                        body: self.body(&b.body, scope, depth + 1)?,
                    })
                }
            }
        }
        Ok(out)
    }

    fn expand_dynamic<'a>(
        &self,
        b: &'a structure::Block,
        scope: &Option<Rc<Scope>>,
        depth: usize,
    ) -> DResult<Vec<Block<'a>>> {
        let block_type = match b.labels.as_slice() {
            [l] => l.as_str().to_string(),
            _ => {
                return Err(Diag::new(
                    b.ident.span(),
                    "Invalid dynamic block",
                    "A dynamic block must have exactly one label: the type of block to generate.",
                ));
            }
        };
        let mut for_each = None;
        let mut iterator = block_type.clone();
        let mut labels_expr = None;
        let mut content = None;
        for item in b.body.iter() {
            match item {
                Structure::Attribute(a) => match a.key.as_str() {
                    "for_each" => for_each = Some(&a.value),
                    "labels" => labels_expr = Some(&a.value),
                    "iterator" => match &a.value {
                        Expression::Variable(v) => iterator = v.as_str().to_string(),
                        other => {
                            return Err(Diag::new(
                                other.span(),
                                "Invalid dynamic iterator name",
                                "Dynamic iterator must be a single variable name.",
                            ));
                        }
                    },
                    other => {
                        return Err(Diag::new(
                            a.key.span(),
                            "Unsupported argument",
                            format!("An argument named \"{other}\" is not expected here."),
                        ));
                    }
                },
                Structure::Block(c) if c.ident.as_str() == "content" && c.labels.is_empty() => {
                    if content.is_some() {
                        return Err(Diag::new(
                            c.ident.span(),
                            "Duplicate content block",
                            "Only one content block is allowed in a dynamic block.",
                        ));
                    }
                    content = Some(&c.body);
                }
                Structure::Block(c) => {
                    return Err(Diag::new(
                        c.ident.span(),
                        "Unsupported block type",
                        format!(
                            "Blocks of type \"{}\" are not expected here.",
                            c.ident.as_str()
                        ),
                    ));
                }
            }
        }
        let for_each = for_each.ok_or_else(|| {
            Diag::new(
                b.ident.span(),
                "Missing required argument",
                "The argument \"for_each\" is required, but no definition was found.",
            )
        })?;
        let content = content.ok_or_else(|| {
            Diag::new(
                b.ident.span(),
                "Missing content block",
                "A dynamic block must have a nested block of type \"content\".",
            )
        })?;
        let coll = self.ctx.eval(for_each, scope)?;
        let pairs = match coll {
            Value::Null => Vec::new(),
            ref v => iterate(v).ok_or_else(|| {
                Diag::new(
                    for_each.span(),
                    "Invalid dynamic for_each value",
                    format!(
                        "Cannot use a {} value in for_each. An iterable collection is required.",
                        v.type_name()
                    ),
                )
            })?,
        };
        let mut out = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            let obj = Value::Object(
                [("key".to_string(), key), ("value".to_string(), value)]
                    .into_iter()
                    .collect(),
            );
            let inner = Some(Scope::bind(scope.clone(), iterator.clone(), obj));
            let labels = match labels_expr {
                None => Vec::new(),
                Some(e) => match self.ctx.eval(e, &inner)? {
                    Value::Tuple(items) => items
                        .iter()
                        .map(|v| match v.to_str() {
                            Ok(Some(s)) => Ok(Label {
                                value: s,
                                span: e.span(),
                            }),
                            _ => Err(Diag::new(
                                e.span(),
                                "Invalid dynamic block label",
                                "Block labels must be strings.",
                            )),
                        })
                        .collect::<DResult<Vec<_>>>()?,
                    other => {
                        return Err(Diag::new(
                            e.span(),
                            "Invalid dynamic block labels",
                            format!(
                                "labels must be a list of strings, not {}.",
                                other.type_name()
                            ),
                        ));
                    }
                },
            };
            self.count(b.ident.span())?;
            out.push(Block {
                ty: block_type.clone(),
                ty_span: b.labels.first().and_then(|l| l.span()),
                labels,
                body: self.body(content, &inner, depth + 1)?,
            });
        }
        Ok(out)
    }
}
