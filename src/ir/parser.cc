#include "ir/parser.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ir/printer.h"

namespace kiln {

namespace {

// ---------------------------------------------------------------- lexer

enum class Tok { End, Ident, ValueRef, String, Number, Punct };

struct Token {
  Tok kind = Tok::End;
  std::string text;  // identifier/number text, decoded string or value name, punctuation
  int line = 1, col = 1;
};

bool ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9') || c == '.'; }
bool digit(char c) { return c >= '0' && c <= '9'; }

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::End: return "end of input";
    case Tok::ValueRef: return "'%" + print_name(t.text) + "'";
    case Tok::String: return "string " + quote_string(t.text);
    default: return "'" + t.text + "'";
  }
}

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  Token next() {
    skip_space_and_comments();
    Token t;
    t.line = line_;
    t.col = col_;
    if (pos_ >= s_.size()) return t;
    char c = s_[pos_];
    if (c == '%') {
      advance();
      t.kind = Tok::ValueRef;
      if (peek() == '"') {
        t.text = read_string(t);
      } else {
        size_t b = pos_;
        while (pos_ < s_.size() && ident_char(s_[pos_])) advance();
        if (b == pos_) fail_at(t, "expected a value name after '%'");
        t.text = std::string(s_.substr(b, pos_ - b));
      }
    } else if (c == '"') {
      t.kind = Tok::String;
      t.text = read_string(t);
    } else if (digit(c) || ((c == '-' || c == '+') && pos_ + 1 < s_.size() &&
                            (digit(s_[pos_ + 1]) || s_[pos_ + 1] == '.' || s_[pos_ + 1] == 'i' ||
                             s_[pos_ + 1] == 'n'))) {
      // Numbers, including -inf / nan spelled with a sign and exponents like 3e-08.
      t.kind = Tok::Number;
      size_t b = pos_;
      advance();
      while (pos_ < s_.size()) {  // loose on purpose: the parser validates the text it gets
        char d = s_[pos_];
        char prev = s_[pos_ - 1];
        if (ident_char(d) || ((d == '-' || d == '+') && (prev == 'e' || prev == 'E')))
          advance();
        else
          break;
      }
      t.text = std::string(s_.substr(b, pos_ - b));
    } else if (ident_start(c)) {
      t.kind = Tok::Ident;
      size_t b = pos_;
      while (pos_ < s_.size() && ident_char(s_[pos_])) advance();
      t.text = std::string(s_.substr(b, pos_ - b));
    } else {
      t.kind = Tok::Punct;
      if ((c == '-' && peek(1) == '>') || (c == ':' && peek(1) == ':')) {
        t.text = std::string(s_.substr(pos_, 2));
        advance();
        advance();
      } else if (std::string_view("(){}[],=:").find(c) != std::string_view::npos) {
        t.text = std::string(1, c);
        advance();
      } else {
        fail_at(t, cat("unexpected character ", quote_string(std::string(1, c))));
      }
    }
    return t;
  }

  [[noreturn]] static void fail_at(const Token& t, const std::string& msg) {
    user_error("line ", t.line, ":", t.col, ": ", msg);
  }

 private:
  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  void advance() {
    if (s_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  void skip_space_and_comments() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else if (c == '/' && peek(1) == '/') {
        while (pos_ < s_.size() && s_[pos_] != '\n') advance();
      } else {
        break;
      }
    }
  }
  int hex_digit(char c) {
    if (digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // At an opening quote; returns the decoded contents.
  std::string read_string(const Token& t) {
    advance();
    std::string r;
    while (true) {
      if (pos_ >= s_.size() || s_[pos_] == '\n') fail_at(t, "unterminated string");
      char c = s_[pos_];
      advance();
      if (c == '"') return r;
      if (c != '\\') {
        r += c;
        continue;
      }
      char e = peek();
      if (pos_ < s_.size()) advance();
      switch (e) {
        case '"': r += '"'; break;
        case '\\': r += '\\'; break;
        case 'n': r += '\n'; break;
        case 't': r += '\t'; break;
        case 'x': {
          int hi = hex_digit(peek()), lo = hex_digit(peek(1));
          if (hi < 0 || lo < 0) fail_at(t, "bad \\x escape in string");
          advance();
          advance();
          r += char(hi * 16 + lo);
          break;
        }
        default: fail_at(t, cat("unknown escape '\\", std::string(1, e), "' in string"));
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

// ---------------------------------------------------------------- number conversion

bool is_floaty(const std::string& s) {
  return s.find_first_of(".eEn") != std::string::npos;  // 'n' covers inf and nan
}

// Parses a float literal (finite, inf, -inf, nan) into F (float or double) exactly.
template <class F>
bool parse_float(const std::string& s, F& out) {
  if (s == "inf" || s == "+inf") return out = std::numeric_limits<F>::infinity(), true;
  if (s == "-inf") return out = -std::numeric_limits<F>::infinity(), true;
  if (s == "nan" || s == "+nan" || s == "-nan") return out = std::numeric_limits<F>::quiet_NaN(), true;
  const char* b = s.data();
  if (*b == '+') ++b;
  auto [p, ec] = std::from_chars(b, s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

template <class I>
bool parse_int(const std::string& s, I& out) {
  const char* b = s.data();
  if (*b == '+') ++b;
  auto [p, ec] = std::from_chars(b, s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// ---------------------------------------------------------------- parser

class Parser {
 public:
  explicit Parser(std::string_view text) : lex_(text) { tok_ = lex_.next(); }

  std::unique_ptr<Graph> parse() {
    g_ = std::make_unique<Graph>();
    expect_keyword("graph");
    if (tok_.kind == Tok::Ident || tok_.kind == Tok::String) {
      g_->set_name(tok_.text);
      next();
    } else {
      fail("a graph name");
    }
    expect_keyword("opset");
    g_->set_opset(int_literal<int64_t>("an opset number"));
    expect("(");
    if (!at(")")) {
      do {
        Token ref = expect_value_ref();
        expect(":");
        TensorType t = type();
        if (g_->find_value(ref.text)) Lexer::fail_at(ref, "value %" + print_name(ref.text) + " is defined twice");
        g_->add_input(ref.text, std::move(t));
      } while (accept(","));
    }
    expect(")");
    expect("->");
    expect("(");
    std::vector<Token> outputs;
    if (!at(")")) {
      do outputs.push_back(expect_value_ref());
      while (accept(","));
    }
    expect(")");
    expect("{");
    while (!at("}")) statement();
    expect("}");
    if (tok_.kind != Tok::End) fail("end of input");
    for (const Token& o : outputs) {
      Value* v = g_->find_value(o.text);
      if (!v) Lexer::fail_at(o, "graph output %" + print_name(o.text) + " is not defined");
      g_->add_output(v);
    }
    return std::move(g_);
  }

 private:
  // --- token helpers
  void next() { tok_ = lex_.next(); }
  bool at(const char* punct) const { return tok_.kind == Tok::Punct && tok_.text == punct; }
  bool at_keyword(const char* kw) const { return tok_.kind == Tok::Ident && tok_.text == kw; }
  bool accept(const char* punct) {
    if (!at(punct)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const {
    Lexer::fail_at(tok_, "expected " + what + ", got " + describe(tok_));
  }
  void expect(const char* punct) {
    if (!accept(punct)) fail(std::string("'") + punct + "'");
  }
  void expect_keyword(const char* kw) {
    if (!at_keyword(kw)) fail(std::string("'") + kw + "'");
    next();
  }
  Token expect_value_ref() {
    if (tok_.kind != Tok::ValueRef) fail("a value like %x");
    Token t = tok_;
    next();
    return t;
  }
  // An identifier or quoted string (op types, domains, attribute names).
  std::string name(const char* what) {
    if (tok_.kind != Tok::Ident && tok_.kind != Tok::String) fail(what);
    std::string s = tok_.text;
    next();
    return s;
  }

  template <class I>
  I int_literal(const char* what) {
    I v{};
    if (tok_.kind != Tok::Number || is_floaty(tok_.text) || !parse_int(tok_.text, v)) fail(what);
    next();
    return v;
  }

  // --- types and tensors
  TensorType type() {
    if (tok_.kind != Tok::Ident) fail("a dtype such as f32");
    const Token start = tok_;
    TensorType t;
    if (tok_.text != "undef") {
      auto dt = dtype_from_name(tok_.text);
      if (!dt) fail("a dtype such as f32");
      t.dtype = *dt;
    }
    next();
    expect("[");
    if (!at("]")) {
      do {
        if (tok_.kind == Tok::Number && tok_.text[0] == '-') fail("a non-negative dimension");
        t.shape.push_back(int_literal<int64_t>("a dimension"));
      } while (accept(","));
    }
    expect("]");
    try {
      shape_numel(t.shape);
    } catch (const UserError& e) {
      Lexer::fail_at(start, e.what());
    }
    return t;
  }

  // The `[e0, e1, ...]` body of a tensor of type t (the caller handles `elided`). Elements are
  // collected before the tensor is allocated, so a huge declared shape with a short literal is an
  // error, not a huge allocation.
  Tensor tensor_literal(const TensorType& t) {
    if (t.dtype == DType::Undefined) fail("a defined dtype for a tensor");
    Token start = tok_;
    int64_t numel = shape_numel(t.shape);  // type() already checked it does not overflow
    expect("[");
    std::vector<Token> elems;
    if (!at("]")) {
      do {
        if (int64_t(elems.size()) >= numel) Lexer::fail_at(tok_, cat("too many elements for ", t.str(), " (", numel, ")"));
        elems.push_back(tok_);
        next();
      } while (accept(","));
    }
    if (int64_t(elems.size()) != numel)
      Lexer::fail_at(start, cat("tensor of type ", t.str(), " needs ", numel, " elements, got ", elems.size()));
    expect("]");
    Tensor out;
    try {
      out = Tensor(t.dtype, t.shape);
    } catch (const UserError& e) {
      Lexer::fail_at(start, e.what());
    }
    for (size_t i = 0; i < elems.size(); ++i) element(out, int64_t(i), elems[i]);
    return out;
  }

  void element(Tensor& out, int64_t i, const Token& tok) {
    const std::string& s = tok.text;
    bool ok = tok.kind == Tok::Number || (tok.kind == Tok::Ident && (s == "inf" || s == "nan" || s == "true" ||
                                                                        s == "false"));
    const char* want = "a number";
    if (ok) {
      dispatch_dtype(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        T* d = out.data<T>();
        if constexpr (std::is_same_v<T, bool>) {
          want = "true or false";
          ok = s == "true" || s == "false" || s == "1" || s == "0";
          d[i] = s == "true" || s == "1";
        } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          float f = 0;
          ok = parse_float(s, f);
          d[i] = T(f);
        } else if constexpr (std::is_floating_point_v<T>) {
          ok = parse_float(s, d[i]);
        } else {
          want = "an integer in range";
          ok = !is_floaty(s) && parse_int(s, d[i]);
        }
      });
    }
    if (!ok) Lexer::fail_at(tok, cat("expected ", want, " for ", dtype_name(out.dtype()), ", got ", describe(tok)));
  }

  // `tensor f32[2] [1, 2]` after the keyword `tensor` (attributes) or `constant` (statements).
  Tensor typed_tensor(const std::string& elided_what) {
    TensorType t = type();
    if (at_keyword("elided")) Lexer::fail_at(tok_, elided_what + " is elided");
    return tensor_literal(t);
  }

  // --- attributes
  Attribute attribute_value(const std::string& attr) {
    if (tok_.kind == Tok::String) {
      std::string s = tok_.text;
      next();
      return s;
    }
    if (tok_.kind == Tok::Number || at_keyword("inf") || at_keyword("nan")) return scalar_number();
    if (at_keyword("tensor")) {
      next();
      return typed_tensor("attribute '" + attr + "'");
    }
    for (const char* kind : {"ints", "floats", "strings"}) {
      if (at_keyword(kind)) {
        next();
        expect("[");
        expect("]");
        if (kind[0] == 'i') return std::vector<int64_t>{};
        if (kind[0] == 'f') return std::vector<float>{};
        return std::vector<std::string>{};
      }
    }
    if (!at("[")) fail("an attribute value");
    next();
    if (at("]")) fail("a list element (write an empty list as ints[], floats[] or strings[])");
    if (tok_.kind == Tok::String) {
      std::vector<std::string> v;
      do {
        if (tok_.kind != Tok::String) fail("a string");
        v.push_back(tok_.text);
        next();
      } while (accept(","));
      expect("]");
      return v;
    }
    std::vector<Attribute> items;
    bool any_float = false;
    do {
      if (!(tok_.kind == Tok::Number || at_keyword("inf") || at_keyword("nan"))) fail("a number");
      items.push_back(scalar_number());
      any_float |= std::holds_alternative<float>(items.back());
    } while (accept(","));
    expect("]");
    if (any_float) {
      std::vector<float> v;
      for (const Attribute& a : items)
        v.push_back(std::holds_alternative<float>(a) ? std::get<float>(a) : float(std::get<int64_t>(a)));
      return v;
    }
    std::vector<int64_t> v;
    for (const Attribute& a : items) v.push_back(std::get<int64_t>(a));
    return v;
  }

  Attribute scalar_number() {
    std::string s = tok_.text;
    if (is_floaty(s)) {
      float f = 0;
      if (!parse_float(s, f)) fail("a float");
      next();
      return f;
    }
    return int_literal<int64_t>("an integer");
  }

  // --- statements
  void statement() {
    if (tok_.kind == Tok::Ident || tok_.kind == Tok::String) return node({});  // a node without outputs
    Token first = expect_value_ref();
    if (accept("=")) return constant(first);
    std::vector<std::pair<Token, TensorType>> outs;
    expect(":");
    outs.push_back({first, type()});
    while (accept(",")) {
      Token ref = expect_value_ref();
      expect(":");
      outs.push_back({ref, type()});
    }
    expect("=");
    node(outs);
  }

  void constant(const Token& ref) {
    expect_keyword("constant");
    Tensor t = typed_tensor("constant %" + print_name(ref.text));
    Value* existing = g_->find_value(ref.text);
    if (!existing) {
      g_->add_constant(ref.text, std::move(t));
    } else if (existing->is_graph_input() && !existing->is_constant() &&
               existing->type() == TensorType{t.dtype(), t.shape()}) {
      existing->set_constant(std::move(t));  // a graph input with a default value
    } else {
      Lexer::fail_at(ref, "value %" + print_name(ref.text) + " is defined twice");
    }
  }

  void node(const std::vector<std::pair<Token, TensorType>>& outs) {
    std::string op = name("an op name"), domain;
    if (accept("::")) {
      domain = op;
      op = name("an op name");
    }
    expect("(");
    std::vector<Value*> inputs;
    if (!at(")")) {
      do {
        if (at_keyword("_")) {
          inputs.push_back(nullptr);
          next();
          continue;
        }
        Token ref = expect_value_ref();
        Value* v = g_->find_value(ref.text);
        if (!v) Lexer::fail_at(ref, "value %" + print_name(ref.text) + " is not defined");
        inputs.push_back(v);
      } while (accept(","));
    }
    expect(")");
    AttributeMap attrs;
    if (accept("{")) {
      if (!at("}")) {
        do {
          Token at_name = tok_;
          std::string an = name("an attribute name");
          expect("=");
          if (attrs.count(an)) Lexer::fail_at(at_name, "attribute '" + an + "' is given twice");
          attrs[an] = attribute_value(an);
        } while (accept(","));
      }
      expect("}");
    }
    std::string node_name;
    if (at_keyword("name")) {
      next();
      expect("=");
      if (tok_.kind != Tok::String) fail("a quoted node name");
      node_name = tok_.text;
      next();
    }
    std::vector<Value*> outputs;
    for (const auto& [ref, t] : outs) {
      if (g_->find_value(ref.text)) Lexer::fail_at(ref, "value %" + print_name(ref.text) + " is defined twice");
      outputs.push_back(g_->add_value(ref.text, t));
    }
    g_->add_node(op, inputs, outputs, std::move(attrs), node_name, domain);
  }

  Lexer lex_;
  Token tok_;
  std::unique_ptr<Graph> g_;
};

}  // namespace

std::unique_ptr<Graph> parse_graph(std::string_view text) { return Parser(text).parse(); }

}  // namespace kiln
