// jinja2's variable scoping, decided statically the way its compiler does (jinja2/idtracking.py):
// each scope records, in template order, the names it loads and stores. A load of a name no scope
// knows yet reads the context; a store of a name neither this scope nor an enclosing one has
// seen makes it a local that is undefined until assigned. Assignments in only some branches of
// an `if` fall back to the enclosing scope or the context. The interpreter then only has to bind
// those "undefined until assigned" names when it opens the scope (Node::body_unset).
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/jinja/parser.h"

namespace deltaserve::common::jinja {
namespace {

enum class Ref { kResolve, kAlias, kUndefined, kParam };

struct Symbols {
  const Symbols* parent = nullptr;
  absl::flat_hash_map<std::string, Ref> refs;
  std::set<std::string> stores;

  bool FindRef(const std::string& name) const {
    for (const Symbols* s = this; s != nullptr; s = s->parent) {
      if (s->refs.contains(name)) return true;
    }
    return false;
  }
  void Load(const std::string& name) {
    if (!FindRef(name)) refs[name] = Ref::kResolve;
  }
  void Store(const std::string& name) {
    stores.insert(name);
    if (refs.contains(name)) return;
    refs[name] = parent != nullptr && parent->FindRef(name) ? Ref::kAlias : Ref::kUndefined;
  }
  void Param(const std::string& name) {
    stores.insert(name);
    refs[name] = Ref::kParam;
  }
  // Merges the scopes of an if's branches (jinja2's Symbols.branch_update).
  void BranchUpdate(const std::vector<Symbols>& branches) {
    absl::flat_hash_map<std::string, size_t> counts;
    for (const Symbols& b : branches) {
      for (const std::string& name : b.stores) {
        if (!stores.contains(name)) ++counts[name];
      }
    }
    for (const Symbols& b : branches) {
      for (const auto& [name, ref] : b.refs) refs[name] = ref;
      stores.insert(b.stores.begin(), b.stores.end());
    }
    for (const auto& [name, count] : counts) {
      if (count == branches.size()) continue;
      refs[name] = parent != nullptr && parent->FindRef(name) ? Ref::kAlias : Ref::kResolve;
    }
  }
  std::vector<std::string> Unset() const {
    std::vector<std::string> names;
    for (const auto& [name, ref] : refs) {
      if (ref == Ref::kUndefined) names.push_back(name);
    }
    return names;
  }
};

void VisitExpr(const Expr* e, Symbols& sym) {
  if (e == nullptr) return;
  if (e->kind == Expr::Kind::kName) sym.Load(e->name);
  for (const ExprPtr& arg : e->args) VisitExpr(arg.get(), sym);
  for (const auto& [name, arg] : e->kwargs) VisitExpr(arg.get(), sym);
}

void VisitBody(Body& body, Symbols& sym);
std::vector<std::string> AnalyzeFrame(Body& body, const Symbols& parent,
                                      const std::vector<std::string>& params);

void VisitStoreTarget(const Expr& target, Symbols& sym) {
  if (target.kind == Expr::Kind::kName) {
    sym.Store(target.name);
  } else if (target.kind == Expr::Kind::kTuple) {
    for (const ExprPtr& t : target.args) sym.Store(t->name);
  } else if (target.kind == Expr::Kind::kAttr) {
    sym.Load(target.args[0]->name);
  }
}

// An if: jinja2 visits the test, then the body, the elif chain and the else each in a copy of
// the scope, and merges the three.
void VisitIf(Node& node, Symbols& sym) {
  VisitExpr(node.branches[0].first.get(), sym);
  std::vector<Symbols> branches(3, sym);
  VisitBody(node.branches[0].second, branches[0]);
  for (size_t i = 1; i < node.branches.size(); ++i) {
    // Each elif is an If of its own (no elif, no else) inside one shared copy.
    Symbols& elifs = branches[1];
    VisitExpr(node.branches[i].first.get(), elifs);
    std::vector<Symbols> inner(3, elifs);
    VisitBody(node.branches[i].second, inner[0]);
    elifs.BranchUpdate(inner);
  }
  VisitBody(node.else_body, branches[2]);
  sym.BranchUpdate(branches);
}

void VisitNode(Node& node, Symbols& sym) {
  switch (node.kind) {
    case Node::Kind::kOutput:
      VisitExpr(node.expr.get(), sym);
      break;
    case Node::Kind::kIf:
      VisitIf(node, sym);
      break;
    case Node::Kind::kFor: {
      VisitExpr(node.expr.get(), sym);
      std::vector<std::string> params = {"loop"};
      if (node.target->kind == Expr::Kind::kName) {
        params.push_back(node.target->name);
      } else {
        for (const ExprPtr& t : node.target->args) params.push_back(t->name);
      }
      node.body_unset = AnalyzeFrame(node.body, sym, params);
      node.else_unset = AnalyzeFrame(node.else_body, sym, {});
      break;
    }
    case Node::Kind::kSet:
      VisitExpr(node.expr.get(), sym);
      VisitStoreTarget(*node.target, sym);
      break;
    case Node::Kind::kSetBlock:
      VisitStoreTarget(*node.target, sym);
      node.body_unset = AnalyzeFrame(node.body, sym, {});
      break;
    case Node::Kind::kMacro: {
      sym.Store(node.name);
      std::vector<std::string> params = node.params;
      params.insert(params.end(), {"caller", "varargs", "kwargs"});
      node.body_unset = AnalyzeFrame(node.body, sym, params);
      break;
    }
    case Node::Kind::kCallBlock:
      VisitExpr(node.expr.get(), sym);
      node.body_unset = AnalyzeFrame(node.body, sym, node.params);
      break;
    case Node::Kind::kFilterBlock:
      VisitExpr(node.filter.get(), sym);
      node.body_unset = AnalyzeFrame(node.body, sym, {});
      break;
    case Node::Kind::kWith:
      for (const ExprPtr& value : node.defaults) VisitExpr(value.get(), sym);
      node.body_unset = AnalyzeFrame(node.body, sym, node.params);
      break;
    case Node::Kind::kScope:
      node.body_unset = AnalyzeFrame(node.body, sym, {});
      break;
    case Node::Kind::kText:
    case Node::Kind::kBreak:
    case Node::Kind::kContinue:
      break;
  }
}

void VisitBody(Body& body, Symbols& sym) {
  for (NodePtr& node : body) VisitNode(*node, sym);
}

std::vector<std::string> AnalyzeFrame(Body& body, const Symbols& parent,
                                      const std::vector<std::string>& params) {
  Symbols sym;
  sym.parent = &parent;
  for (const std::string& p : params) sym.Param(p);
  VisitBody(body, sym);
  return sym.Unset();
}

}  // namespace

void AnalyzeScopes(Template& tmpl) {
  Symbols root;
  VisitBody(tmpl.body, root);
  tmpl.root_unset = root.Unset();
}

}  // namespace deltaserve::common::jinja
