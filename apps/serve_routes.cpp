// Routes of `encore serve`: TEI's JSON shapes (router/src/http/types.rs) and OpenAI's embeddings shape.
#include "apps/serve_routes.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "encore/sentence_encoder.hpp"
#include "encore/records.hpp"

namespace encore::cli {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// An error with its HTTP status and TEI error_type, thrown inside a route and turned into the reply.
struct HttpError {
  int status;
  std::string message, type;
};

[[noreturn]] void fail(int status, const std::string& message, const std::string& type = "Validation") {
  throw HttpError{status, message, type};
}

http::Response json_reply(std::string body, int status = 200) {
  http::Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

http::Response error_reply(const HttpError& e) {
  http::Response r = json_reply(http::json_error(e.message, e.type), e.status);
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }
// A value in an error message: its type and at most 60 characters of it (not the whole 2 MB body echoed back).
std::string describe(const Json& j) {
  std::string s = dump(j);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return std::string(j.type_name()) + " " + s;
}

// Shortest text that reads back as the same float32 (JSON has no NaN/Inf: those become null).
void append_floats(std::string& out, const float* p, size_t n) {
  char buf[32];
  out.push_back('[');
  for (size_t i = 0; i < n; ++i) {
    if (i) out.push_back(',');
    if (!std::isfinite(p[i])) {
      out += "null";
      continue;
    }
    auto res = std::to_chars(buf, buf + sizeof buf, p[i]);
    out.append(buf, res.ptr);
  }
  out.push_back(']');
}

// RFC 4648 base64 of the floats' little-endian bytes (OpenAI's encoding_format "base64").
std::string base64_floats(const std::vector<float>& v) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  const size_t n = v.size() * sizeof(float);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t x = (uint32_t(b[i]) << 16) | (i + 1 < n ? uint32_t(b[i + 1]) << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
    out.push_back(alphabet[(x >> 18) & 63]);
    out.push_back(alphabet[(x >> 12) & 63]);
    out.push_back(i + 1 < n ? alphabet[(x >> 6) & 63] : '=');
    out.push_back(i + 2 < n ? alphabet[x & 63] : '=');
  }
  return out;
}

// Both strings are compared in full whatever their contents (no early exit), so response time does not tell
// how much of a guessed key was right.
bool constant_time_equal(const std::string& given, const std::string& expected) {
  volatile unsigned char diff = given.size() == expected.size() ? 0 : 1;
  const size_t n = std::max(given.size(), expected.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char a = i < given.size() ? given[i] : 0, b = i < expected.size() ? expected[i] : 0;
    diff = diff | (a ^ b);
  }
  return diff == 0;
}

// Inputs of an embedding-like request: texts, or token ids (TEI accepts both).
struct Inputs {
  std::vector<std::string> texts;
  std::vector<std::vector<int64_t>> ids;
  bool single = false;  // a bare string (or one id list) rather than a list
  size_t size() const { return texts.empty() ? ids.size() : texts.size(); }
};

std::vector<int64_t> parse_ids(const Json& v, const std::string& what, int64_t vocab) {
  std::vector<int64_t> ids;
  ids.reserve(v.size());
  for (const Json& x : v) {
    if (!x.is_number_integer()) fail(422, what + ": token ids must be integers, got " + describe(x));
    // an unsigned id above int64's range would read back negative: compare it as it was written
    const bool huge = x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
    const int64_t id = huge ? INT64_MAX : x.get<int64_t>();
    if (id < 0 || id >= vocab)
      fail(422, what + ": token id " + x.dump() + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    ids.push_back(id);
  }
  if (ids.empty()) fail(400, what + ": an empty list of token ids", "Empty");
  return ids;
}

Inputs parse_inputs(const Json& body, const std::string& field, int64_t vocab) {
  if (!body.contains(field)) fail(422, "missing field `" + field + "`");
  const Json& v = body[field];
  Inputs in;
  if (v.is_string()) {
    in.texts.push_back(v.get<std::string>());
    in.single = true;
    return in;
  }
  if (!v.is_array())
    fail(422, "`" + field + "` must be a string, a list of strings, a list of token ids or a list of lists of "
              "token ids; got " + std::string(v.type_name()));
  if (v.empty()) fail(400, "`" + field + "` cannot be empty", "Empty");
  if (v[0].is_number()) {
    in.ids.push_back(parse_ids(v, "`" + field + "`", vocab));
    in.single = true;
    return in;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& x = v[i];
    const std::string what = "`" + field + "`[" + std::to_string(i) + "]";
    if (x.is_string() && in.ids.empty()) {
      in.texts.push_back(x.get<std::string>());
    } else if (x.is_array() && in.texts.empty()) {
      in.ids.push_back(parse_ids(x, what, vocab));
    } else {
      fail(422, what + " is " + std::string(x.type_name()) +
                    ": the list must hold only strings or only lists of token ids");
    }
  }
  return in;
}

template <typename T>
T get_or(const Json& body, const char* key, T fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  const Json& v = body[key];
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) fail(422, std::string("`") + key + "` must be a boolean, got " + describe(v));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) fail(422, std::string("`") + key + "` must be a string, got " + describe(v));
  } else {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())))
      fail(422, std::string("`") + key + "` must be an integer in [" + std::to_string(std::numeric_limits<T>::min()) +
                    ", " + std::to_string(std::numeric_limits<T>::max()) + "], got " + describe(v));
  }
  return v.get<T>();
}

Side parse_direction(const Json& body) {
  const std::string d = get_or<std::string>(body, "truncation_direction", "right");
  if (d == "right" || d == "Right") return Side::right;
  if (d == "left" || d == "Left") return Side::left;
  fail(422, "`truncation_direction` must be \"right\" or \"left\", got \"" + d + "\"");
}

Json parse_body(const http::Request& req) {
  if (req.body.empty()) fail(400, "empty request body: expected a JSON object", "Empty");
  if (const size_t at = json_too_deep_at(req.body); at != std::string::npos)
    fail(400, "the request body is not read: " + json_too_deep_message(at));
  Json j;
  try {
    j = Json::parse(req.body);
  } catch (const Json::parse_error& e) {
    const std::string what = e.what();
    if (what.find("UTF-8") != std::string::npos)
      fail(400, "the request body is not valid UTF-8 (byte " + std::to_string(e.byte) + ")");
    fail(400, "the request body is not valid JSON: " + what);
  }
  if (!j.is_object()) fail(422, std::string("the request body must be a JSON object, got ") + j.type_name());
  // serde (TEI) refuses a field given twice (of those it knows; encore any), where the last value would win here
  if (const std::optional<std::string> twice = json_duplicate_top_level_key(req.body))
    fail(422, "duplicate field `" + *twice + "`");
  return j;
}

// Holds `n` of --max-concurrent-requests' permits while its request lives (in the engine or being answered).
class Permits {
 public:
  Permits(std::atomic<int64_t>& used, int64_t n) : used_(used), n_(n) {}
  ~Permits() { used_ -= n_; }
  Permits(const Permits&) = delete;
  Permits& operator=(const Permits&) = delete;

 private:
  std::atomic<int64_t>& used_;
  int64_t n_;
};

enum class Kind { embed, embed_all, openai, predict, rerank_tei, rerank_cohere };

}  // namespace

struct Router::Impl {
  ServeConfig config;
  std::shared_ptr<const SentenceEncoder> encoder;
  serve::Engine& engine;
  ServeMetrics& metrics;
  std::atomic<int64_t> permits_used{0};
  int64_t vocab = 0, max_length = 0;
  std::string head;               // "", "sequence_classification"
  std::vector<std::string> labels;

  Impl(ServeConfig c, std::shared_ptr<const SentenceEncoder> e, serve::Engine& eng, ServeMetrics& m)
      : config(std::move(c)), encoder(std::move(e)), engine(eng), metrics(m) {
    vocab = encoder->tokenizer().vocab_size();
    max_length = encoder->max_seq_length();
    head = encoder->model().info().head;
    labels = encoder->model().info().id2label;
  }

  bool is_classifier() const { return head == "sequence_classification"; }
  bool is_reranker() const { return is_classifier() && encoder->model().info().num_labels == 1; }
  std::string label(size_t i) const { return i < labels.size() && !labels[i].empty() ? labels[i] : "LABEL_" + std::to_string(i); }

  std::shared_ptr<Permits> admit(int64_t n) {
    int64_t cur = permits_used.load();
    do {
      if (cur + n > config.max_concurrent_requests) {
        metrics.observe_rejection("overloaded");
        fail(429, "Model is overloaded", "Overloaded");
      }
    } while (!permits_used.compare_exchange_weak(cur, cur + n));
    return std::make_shared<Permits>(permits_used, n);
  }

  void check_batch_size(size_t n) const {
    if (static_cast<int64_t>(n) > config.max_client_batch_size)
      fail(422, "batch size " + std::to_string(n) + " > maximum allowed batch size " +
                    std::to_string(config.max_client_batch_size) + " (--max-client-batch-size)");
  }

  // Texts (with the prompt prepended) or ids -> sequences within the model's length, per `truncate`.
  std::vector<Encoding> sequences(const Inputs& in, bool truncate, Side direction, const std::string& prompt) {
    std::vector<Encoding> seqs;
    if (!in.texts.empty()) {
      std::vector<std::string> texts = in.texts;
      if (!prompt.empty())
        for (auto& t : texts) t = prompt + t;
      TokenizeOptions opt;
      opt.truncate = truncate;
      opt.direction = direction;
      seqs = encoder->tokenize(texts, opt);
    } else {
      for (const auto& ids : in.ids) {
        Encoding e;
        e.ids = ids;
        if (truncate && static_cast<int64_t>(e.ids.size()) > max_length) {
          if (direction == Side::left)
            e.ids.erase(e.ids.begin(), e.ids.end() - max_length);
          else
            e.ids.resize(max_length);
        }
        e.type_ids.assign(e.ids.size(), 0);
        seqs.push_back(std::move(e));
      }
    }
    check_lengths(seqs);
    return seqs;
  }

  void check_lengths(const std::vector<Encoding>& seqs) const {
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t n = static_cast<int64_t>(seqs[i].size());
      if (n > max_length)
        fail(413, "input " + std::to_string(i) + " has " + std::to_string(n) + " tokens, more than the model's maximum " +
                      std::to_string(max_length) + "; send \"truncate\": true or start the server with --auto-truncate");
      if (n == 0) fail(422, "input " + std::to_string(i) + " has no tokens (add_special_tokens is off and the text is empty)");
    }
  }

  // TEI's prompt_name: a prompt only when asked (the model's default_prompt_name is not applied), looked up by the
  // library (an unknown name is a 422 naming the model's prompts).
  std::string prompt_of(const Json& body) const {
    EncodeOptions named;
    named.prompt_name = get_or<std::string>(body, "prompt_name", "");
    if (named.prompt_name->empty()) return "";
    try {
      return encoder->resolve_prompt(named);
    } catch (const UsageError& e) {
      fail(422, e.what());
    }
  }

  // Matryoshka slicing then L2 normalisation (TEI's order), with the library's normalize_rows.
  std::vector<float> finish_embedding(const std::vector<float>& raw, int64_t dimensions, bool normalize) const {
    std::vector<float> v(raw.begin(), raw.begin() + (dimensions > 0 ? dimensions : static_cast<int64_t>(raw.size())));
    if (!normalize) return v;
    const Tensor t = normalize_rows(Tensor::from_floats({1, static_cast<int64_t>(v.size())}, v.data()));
    std::copy_n(t.data<float>(), v.size(), v.data());
    return v;
  }

  int64_t parse_dimensions(const Json& body) const {
    if (!body.contains("dimensions") || body["dimensions"].is_null()) return 0;
    const int64_t d = get_or<int64_t>(body, "dimensions", 0);
    if (d < 1 || d > encoder->dimension())
      fail(422, "`dimensions` must be in [1, " + std::to_string(encoder->dimension()) + "], got " + std::to_string(d));
    return d;
  }

  // Submits to the engine; the reply is built on the connection's strand, never on the engine thread.
  template <typename Build>
  void run(const http::Exchange& ex, std::vector<Encoding> seqs, serve::Task task, std::shared_ptr<Permits> permits,
           Build build) {
    const auto t0 = std::chrono::steady_clock::now();
    auto on_done = [ex, permits, build = std::move(build), t0](serve::EngineResult r) mutable {
      ex.post([ex, permits, build = std::move(build), r = std::move(r), t0]() mutable {
        if (!r.error.empty()) return ex.reply(error_reply(HttpError{424, "inference failed: " + r.error, "Backend"}));
        http::Response resp;
        try {
          resp = json_reply(build(r));
        } catch (const HttpError& e) {
          return ex.reply(error_reply(e));
        } catch (const std::exception& e) {
          return ex.reply(error_reply(HttpError{500, std::string("internal error: ") + e.what(), "Backend"}));
        }
        auto ms = [](double s) { return std::to_string(static_cast<int64_t>(std::llround(s * 1000))); };
        const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        resp.headers.emplace_back("x-compute-tokens", std::to_string(r.tokens));
        resp.headers.emplace_back("x-queue-time", ms(r.queue_seconds));
        resp.headers.emplace_back("x-inference-time", ms(r.inference_seconds));
        resp.headers.emplace_back("x-compute-time", ms(total));
        ex.reply(std::move(resp));
      });
    };
    serve::RequestId id;
    try {
      id = engine.submit(std::move(seqs), task, std::move(on_done));
    } catch (const Error& e) {
      fail(503, std::string("the engine refused the request: ") + e.what(), "Unhealthy");
    }
    ex.on_disconnect([this, id] {
      engine.cancel(id);
      metrics.observe_rejection("client_disconnected");
    });
  }

  void embed(const http::Request& req, const http::Exchange& ex, Kind kind) {
    const Json body = parse_body(req);
    const bool openai = kind == Kind::openai;
    const Inputs in = parse_inputs(body, openai ? "input" : "inputs", vocab);
    check_batch_size(in.size());
    const bool truncate = get_or<bool>(body, "truncate", config.auto_truncate);
    const Side direction = parse_direction(body);
    const bool normalize = openai ? true : get_or<bool>(body, "normalize", true);
    const int64_t dimensions = kind == Kind::embed_all ? 0 : parse_dimensions(body);
    const std::string prompt = openai ? "" : prompt_of(body);
    std::string format = "float";
    if (openai) {
      format = get_or<std::string>(body, "encoding_format", "float");
      if (format != "float" && format != "base64")
        fail(422, "`encoding_format` must be \"float\" or \"base64\", got \"" + format + "\"");
      get_or<std::string>(body, "model", "");  // accepted and ignored, as TEI does (type-checked)
    }
    auto permits = admit(static_cast<int64_t>(in.size()));
    std::vector<Encoding> seqs = sequences(in, truncate, direction, prompt);
    if (kind == Kind::embed_all) {
      return run(ex, std::move(seqs), serve::Task::token_embeddings, permits, [](const serve::EngineResult& r) {
        std::string out = "[";
        for (size_t i = 0; i < r.outputs.size(); ++i) {
          if (i) out.push_back(',');
          out.push_back('[');
          const std::vector<float>& v = r.outputs[i];
          const size_t H = r.outputs[i].size() / std::max<size_t>(1, r.lengths[i]);
          for (size_t t = 0; t < r.lengths[i]; ++t) {
            if (t) out.push_back(',');
            append_floats(out, v.data() + t * H, H);
          }
          out.push_back(']');
        }
        return out + "]";
      });
    }
    const std::string model_id = config.model_id;
    run(ex, std::move(seqs), serve::Task::embed, permits,
        [this, openai, format, dimensions, normalize, model_id](const serve::EngineResult& r) {
          std::string out = openai ? "{\"object\":\"list\",\"data\":[" : "[";
          for (size_t i = 0; i < r.outputs.size(); ++i) {
            if (i) out.push_back(',');
            const std::vector<float> v = finish_embedding(r.outputs[i], dimensions, normalize);
            if (!openai) {
              append_floats(out, v.data(), v.size());
              continue;
            }
            out += "{\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":";
            if (format == "base64")
              out += "\"" + base64_floats(v) + "\"";
            else
              append_floats(out, v.data(), v.size());
            out.push_back('}');
          }
          if (!openai) return out + "]";
          out += "],\"model\":" + dump(Json(model_id)) + ",\"usage\":{\"prompt_tokens\":" + std::to_string(r.tokens) +
                 ",\"total_tokens\":" + std::to_string(r.tokens) + "}}";
          return out;
        });
  }

  void require_classifier(const char* route, bool reranker) const {
    const auto& info = encoder->model().info();
    if (!is_classifier())
      fail(424, std::string(route) + ": the loaded model (" + info.architecture + ") has no sequence-classification head, so it is not a " +
                    (reranker ? "re-ranker" : "classifier") + " model; load a *ForSequenceClassification checkpoint (a cross-encoder) for " + route,
           "Backend");
    if (reranker && info.num_labels != 1)
      fail(424, std::string(route) + ": the model is a classifier with " + std::to_string(info.num_labels) +
                    " labels, not a re-ranker (a re-ranker has exactly one output)", "Backend");
  }

  void predict(const http::Request& req, const http::Exchange& ex) {
    require_classifier("/predict", false);
    const Json body = parse_body(req);
    if (!body.contains("inputs")) fail(422, "missing field `inputs`");
    const Json& v = body["inputs"];
    // TEI's PredictInput: a string, a pair [a, b], or a list of strings / [a] / [a, b].
    std::vector<std::pair<std::string, std::optional<std::string>>> items;
    bool single = false;
    auto sequence = [&](const Json& x, const std::string& what) -> std::pair<std::string, std::optional<std::string>> {
      if (x.is_string()) return {x.get<std::string>(), std::nullopt};
      if (x.is_array() && (x.size() == 1 || x.size() == 2) && std::all_of(x.begin(), x.end(), [](const Json& s) { return s.is_string(); }))
        return {x[0].get<std::string>(), x.size() == 2 ? std::optional<std::string>(x[1].get<std::string>()) : std::nullopt};
      fail(422, what + " must be a string or a list of one or two strings, got " + describe(x));
    };
    if (v.is_string() || (v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string())) {
      items.push_back(sequence(v, "`inputs`"));
      single = true;
    } else if (v.is_array()) {
      if (v.empty()) fail(400, "`inputs` cannot be empty", "Empty");
      for (size_t i = 0; i < v.size(); ++i) items.push_back(sequence(v[i], "`inputs`[" + std::to_string(i) + "]"));
    } else {
      fail(422, "`inputs` must be a string, a pair of strings or a list of them");
    }
    check_batch_size(items.size());
    const bool raw = get_or<bool>(body, "raw_scores", false);
    TokenizeOptions opt;
    opt.truncate = get_or<bool>(body, "truncate", config.auto_truncate);
    opt.direction = parse_direction(body);
    auto permits = admit(static_cast<int64_t>(items.size()));
    std::vector<Encoding> seqs;
    for (auto& [a, b] : items) seqs.push_back(b ? encoder->tokenize_pair(a, *b, opt) : encoder->tokenize({a}, opt)[0]);
    check_lengths(seqs);
    run(ex, std::move(seqs), serve::Task::classify, permits, [this, raw, single](const serve::EngineResult& r) {
      Json all = Json::array();
      for (const auto& logits : r.outputs) {
        const std::vector<float> s = serve::classification_scores(logits, raw);
        std::vector<size_t> order(s.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s[a] > s[b]; });
        Json one = Json::array();
        for (size_t k : order) one.push_back({{"score", s[k]}, {"label", label(k)}});
        all.push_back(one);
      }
      return dump(single ? all[0] : all);
    });
  }

  void rerank(const http::Request& req, const http::Exchange& ex) {
    require_classifier("/rerank", true);
    const Json body = parse_body(req);
    const bool cohere = body.contains("documents");
    const std::string field = cohere ? "documents" : "texts";
    const std::string query = get_or<std::string>(body, "query", "");
    if (!body.contains("query")) fail(422, "missing field `query`");
    if (!body.contains(field)) fail(422, "missing field `texts` (TEI) or `documents` (Cohere/infinity)");
    const Json& docs = body[field];
    if (!docs.is_array()) fail(422, "`" + field + "` must be a list of strings");
    if (docs.empty()) fail(400, "`" + field + "` cannot be empty", "Empty");
    std::vector<std::string> texts;
    for (size_t i = 0; i < docs.size(); ++i) {
      if (!docs[i].is_string()) fail(422, "`" + field + "`[" + std::to_string(i) + "] must be a string, got " + describe(docs[i]));
      texts.push_back(docs[i].get<std::string>());
    }
    check_batch_size(texts.size());
    const bool raw = get_or<bool>(body, "raw_scores", false);
    const bool return_text = get_or<bool>(body, cohere ? "return_documents" : "return_text", false);
    int64_t top_n = static_cast<int64_t>(texts.size());
    if (body.contains("top_n") && !body["top_n"].is_null()) {
      top_n = get_or<int64_t>(body, "top_n", top_n);
      if (top_n < 1) fail(422, "`top_n` must be positive, got " + std::to_string(top_n));
    }
    TokenizeOptions opt;
    opt.truncate = get_or<bool>(body, "truncate", config.auto_truncate);
    opt.direction = parse_direction(body);
    auto permits = admit(static_cast<int64_t>(texts.size()));
    std::vector<Encoding> seqs;
    for (auto& t : texts) seqs.push_back(encoder->tokenize_pair(query, t, opt));
    check_lengths(seqs);
    const std::string model_id = config.model_id;
    run(ex, std::move(seqs), serve::Task::classify, permits,
        [texts, raw, return_text, cohere, top_n, model_id](const serve::EngineResult& r) {
          std::vector<float> score(r.outputs.size());
          for (size_t i = 0; i < score.size(); ++i) score[i] = serve::classification_scores(r.outputs[i], raw)[0];
          std::vector<size_t> order(score.size());
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
          order.resize(std::min<size_t>(order.size(), static_cast<size_t>(top_n)));
          Json results = Json::array();
          for (size_t i : order) {
            Json item = {{"index", i}, {cohere ? "relevance_score" : "score", score[i]}};
            if (return_text) item[cohere ? "document" : "text"] = texts[i];
            results.push_back(item);
          }
          if (!cohere) return dump(results);
          char id[40];
          std::snprintf(id, sizeof id, "encore-%016llx", static_cast<unsigned long long>(std::random_device{}()) << 32 ^
                                                             static_cast<unsigned long long>(std::random_device{}()));
          return dump(Json{{"object", "rerank"}, {"results", results}, {"model", model_id},
                           {"usage", {{"prompt_tokens", r.tokens}, {"total_tokens", r.tokens}}},
                           {"id", id}, {"created", static_cast<int64_t>(std::time(nullptr))}});
        });
  }

  http::Response tokenize(const http::Request& req) {
    const Json body = parse_body(req);
    const Inputs in = parse_inputs(body, "inputs", vocab);
    if (in.texts.empty()) fail(422, "`inputs` must be a string or a list of strings");
    check_batch_size(in.size());
    TokenizeOptions opt;
    opt.truncate = false;
    opt.add_special_tokens = get_or<bool>(body, "add_special_tokens", true);
    const std::string prompt = prompt_of(body);
    // Written straight into the reply, the keys in the order a JSON object of them dumps (id, special, start,
    // stop, text): a DOM of one object per token took ~450x the text in memory (a 1.95 MB text: 0.9 GB).
    std::string out = "[";
    for (size_t i = 0; i < in.texts.size(); ++i) {
      const std::string text = prompt + in.texts[i];
      const Encoding e = encoder->tokenize({text}, opt)[0];
      out += i ? ",[" : "[";
      for (size_t t = 0; t < e.size(); ++t) {
        const bool special = t < e.special_tokens_mask.size() && e.special_tokens_mask[t] == 1;
        out += t ? ",{\"id\":" : "{\"id\":";
        out += std::to_string(e.ids[t]);
        if (special) {
          out += ",\"special\":true,\"start\":null,\"stop\":null,\"text\":" + dump(Json(e.tokens[t])) + "}";
        } else {
          const auto [b, end] = e.offsets[t];
          out += ",\"special\":false,\"start\":" + std::to_string(b) + ",\"stop\":" + std::to_string(end) +
                 ",\"text\":" + dump(Json(text.substr(static_cast<size_t>(b), static_cast<size_t>(end - b)))) + "}";
        }
      }
      out += "]";
    }
    out += "]";
    return json_reply(std::move(out));
  }

  http::Response decode(const http::Request& req) {
    const Json body = parse_body(req);
    if (!body.contains("ids")) fail(422, "missing field `ids`");
    const Json& v = body["ids"];
    if (!v.is_array()) fail(422, "`ids` must be a list of token ids or a list of lists of token ids");
    if (v.empty()) fail(400, "`ids` cannot be empty", "Empty");
    const bool skip = get_or<bool>(body, "skip_special_tokens", true);
    std::vector<std::vector<int64_t>> lists;
    if (v[0].is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_array()) fail(422, "`ids`[" + std::to_string(i) + "] must be a list of token ids");
        lists.push_back(parse_ids(v[i], "`ids`[" + std::to_string(i) + "]", vocab));
      }
    } else {
      lists.push_back(parse_ids(v, "`ids`", vocab));
    }
    check_batch_size(lists.size());
    Json out = Json::array();
    for (auto& ids : lists) out.push_back(encoder->tokenizer().decode(ids, skip));
    return json_reply(dump(out));
  }

  http::Response info() const {
    const auto& mi = encoder->model().info();
    Json model_type;
    if (is_classifier()) {
      Json id2label = Json::object(), label2id = Json::object();
      for (int64_t i = 0; i < mi.num_labels; ++i) {
        id2label[std::to_string(i)] = label(i);
        label2id[label(i)] = i;
      }
      model_type[is_reranker() ? "reranker" : "classifier"] = {{"id2label", id2label}, {"label2id", label2id}};
    } else {
      std::string modes;
      for (auto& m : encoder->pooling().modes) modes += (modes.empty() ? "" : "+") + m;
      model_type["embedding"] = {{"pooling", modes}};
    }
    Json j = {{"model_id", config.model_id},
              {"model_sha", nullptr},
              {"model_dtype", config.dtype},
              {"model_type", model_type},
              {"architecture", mi.architecture},
              {"embedding_dimension", encoder->dimension()},
              {"max_concurrent_requests", config.max_concurrent_requests},
              {"max_input_length", max_length},
              {"max_batch_tokens", config.max_batch_tokens},
              {"max_batch_requests", config.max_batch_requests > 0 ? Json(config.max_batch_requests) : Json(nullptr)},
              {"max_client_batch_size", config.max_client_batch_size},
              {"auto_truncate", config.auto_truncate},
              {"tokenization_workers", config.io_threads},
              {"prompts", encoder->prompts()},
              {"version", "0.1.0"},
              {"sha", nullptr},
              {"docker_label", nullptr},
              {"engine", "encore"}};
    return json_reply(dump(j));
  }
};

Router::Router(ServeConfig config, std::shared_ptr<const SentenceEncoder> encoder, serve::Engine& engine,
               ServeMetrics& metrics, const http::Server* server)
    : impl_(std::make_shared<Impl>(std::move(config), std::move(encoder), engine, metrics)), server_(server) {}

namespace {
struct RouteSpec {
  const char* path;
  const char* method;
};
const RouteSpec kRoutes[] = {{"/health", "GET"},   {"/info", "GET"},      {"/metrics", "GET"},  {"/embed", "POST"},
                             {"/embed_all", "POST"}, {"/embed_sparse", "POST"}, {"/v1/embeddings", "POST"},
                             {"/embeddings", "POST"}, {"/", "POST"},       {"/predict", "POST"}, {"/rerank", "POST"},
                             {"/tokenize", "POST"}, {"/decode", "POST"}};
}  // namespace

std::string Router::route_label(const std::string& path) const {
  for (const auto& r : kRoutes)
    if (path == r.path) return path;
  return "unknown";
}

void Router::handle(const http::Request& req, const http::Exchange& ex) {
  Impl& m = *impl_;
  try {
    const RouteSpec* route = nullptr;
    for (const auto& r : kRoutes)
      if (req.path == r.path) route = &r;
    if (!route) {
      std::string known;
      for (const auto& r : kRoutes) known += std::string(known.empty() ? "" : ", ") + r.method + " " + r.path;
      fail(404, "no route " + req.path + " (routes: " + known + ")", "NotFound");
    }
    if (req.method != route->method) {
      http::Response r = error_reply(HttpError{405, std::string("method ") + req.method + " is not allowed on " +
                                                       req.path + "; use " + route->method, "MethodNotAllowed"});
      r.headers.emplace_back("Allow", route->method);
      return ex.reply(std::move(r));
    }
    if (req.path == "/health") return ex.reply(json_reply("{\"status\":\"ok\"}"));  // public, as in TEI
    if (!m.config.api_key.empty()) {
      const std::string prefix = "Bearer ";
      const bool bearer = req.authorization.compare(0, prefix.size(), prefix) == 0;
      const std::string given = bearer ? req.authorization.substr(prefix.size()) : "";
      if (!bearer || !constant_time_equal(given, m.config.api_key))
        fail(401, req.authorization.empty() ? "missing API key: send the header Authorization: Bearer <key>"
                                            : "wrong API key", "Unauthorized");
    }
    if (req.path == "/info") return ex.reply(m.info());
    if (req.path == "/metrics") {
      http::Response r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = m.metrics.render(m.engine.stats(), server_ ? server_->in_flight() : 0,
                                server_ ? server_->open_connections() : 0, m.permits_used.load(),
                                m.config.max_concurrent_requests);
      return ex.reply(std::move(r));
    }
    if (req.path == "/embed") return m.embed(req, ex, Kind::embed);
    if (req.path == "/embed_all") return m.embed(req, ex, Kind::embed_all);
    if (req.path == "/v1/embeddings" || req.path == "/embeddings") return m.embed(req, ex, Kind::openai);
    if (req.path == "/") return m.is_classifier() ? m.predict(req, ex) : m.embed(req, ex, Kind::embed);
    if (req.path == "/predict") return m.predict(req, ex);
    if (req.path == "/rerank") return m.rerank(req, ex);
    if (req.path == "/tokenize") return ex.reply(m.tokenize(req));
    if (req.path == "/decode") return ex.reply(m.decode(req));
    if (req.path == "/embed_sparse")
      fail(424, "/embed_sparse: the loaded model (" + m.encoder->model().info().architecture +
                    ") has no sparse (SPLADE) head; encore serves sparse embeddings once a masked-LM head with SPLADE "
                    "pooling is supported", "Backend");
    fail(404, "no route " + req.path, "NotFound");
  } catch (const HttpError& e) {
    ex.reply(error_reply(e));
  } catch (const Error& e) {
    ex.reply(error_reply(HttpError{422, e.what(), "Validation"}));
  } catch (const Json::exception& e) {
    ex.reply(error_reply(HttpError{422, std::string("invalid request: ") + e.what(), "Validation"}));
  } catch (const std::exception& e) {
    ex.reply(error_reply(HttpError{500, std::string("internal error: ") + e.what(), "Backend"}));
  }
}

}  // namespace encore::cli
