// Bindings for checkpoint-level APIs: encore.AutoModel (and, with the tokenizer, SentenceEncoder/Tokenizer).
#include "encore/model.hpp"
#include "numpy_convert.hpp"

namespace encore_py {

void bind_models(py::module_& m) {
  py::class_<encore::AutoModel>(m, "AutoModel",
                                "A Hugging Face encoder checkpoint (config.json + model.safetensors) loaded for "
                                "inference and training: bert (MiniLM, BGE, E5), roberta, xlm-roberta, distilbert, "
                                "albert, electra, mpnet; with its classification head when the checkpoint has one. "
                                "Load with AutoModel.load(path, dtype='fp32').")
      .def_static(
          "load",
          [](const std::string& path, const std::string& dtype) {
            const encore::DType d = encore::parse_dtype(dtype);
            py::gil_scoped_release nogil;
            return encore::AutoModel::load(path, d);
          },
          py::arg("path"), py::arg("dtype") = "fp32",
          "Loads a checkpoint directory. dtype: 'fp32', 'bf16' or 'int8' encoder GEMMs (weights prepared once at "
          "load; activations, LayerNorm and softmax stay float32).")
      .def_static("supported_model_types", &encore::AutoModel::supported_model_types,
                  "the config.json model_type values encore loads")
      .def("__repr__",
           [](encore::AutoModel& self) {
             // AutoModel(family='bert', architecture='BertModel', dtype=float32, stored=float32, layers=6,
             // hidden_size=384, heads=12, intermediate_size=1536, activation=gelu, parameters=22713216)
             const encore::ModelInfo& mi = self.info();
             std::string s = "AutoModel(family='" + mi.model_type + "', architecture='" + mi.architecture +
                             "', dtype=" + mi.dtype + ", stored=" + mi.stored_dtype +
                             ", layers=" + std::to_string(mi.num_layers) +
                             ", hidden_size=" + std::to_string(mi.hidden_size) +
                             ", heads=" + std::to_string(mi.num_heads) +
                             ", intermediate_size=" + std::to_string(mi.intermediate_size) +
                             ", activation=" + mi.hidden_act +
                             ", parameters=" + std::to_string(self.module().num_parameters());
             if (!mi.head.empty()) {
               s += ", head=" + mi.head + ", labels=[";
               for (size_t i = 0; i < mi.id2label.size(); ++i) s += (i ? ", '" : "'") + mi.id2label[i] + "'";
               s += "]";
             }
             return s + ")";
           })
      .def(
          "__call__",
          [](const encore::AutoModel& self, const py::object& input_ids, const py::object& attention_mask,
             const py::object& token_type_ids, bool output_hidden_states, bool output_attentions,
             bool return_dict, bool skip_padding) -> py::object {
            Tensor ids = int_tensor(input_ids, "input_ids");
            if (ids.defined() && ids.dim() == 1) ids = ids.unsqueeze(0);
            Tensor mask = int_tensor(attention_mask, "attention_mask");
            Tensor types = int_tensor(token_type_ids, "token_type_ids");
            encore::ForwardOptions opt;
            opt.output_hidden_states = output_hidden_states;
            opt.output_attentions = output_attentions;
            opt.skip_padding = skip_padding;
            encore::ModelOutput out;
            {
              py::gil_scoped_release nogil;
              out = self.forward(ids, mask, types, opt);
            }
            if (!return_dict && !output_hidden_states && !output_attentions) return to_numpy(out.last_hidden_state);
            py::dict d;
            d["last_hidden_state"] = to_numpy(out.last_hidden_state);
            d["pooler_output"] = to_numpy(out.pooler_output);
            d["logits"] = to_numpy(out.logits);
            if (output_hidden_states) {
              py::list hs;
              for (auto& h : out.hidden_states) hs.append(to_numpy(h));
              d["hidden_states"] = py::tuple(hs);
            }
            if (output_attentions) {
              py::list at;
              for (auto& a : out.attentions) at.append(to_numpy(a));
              d["attentions"] = py::tuple(at);
            }
            return d;
          },
          py::arg("input_ids"), py::arg("attention_mask") = py::none(), py::arg("token_type_ids") = py::none(),
          py::arg("output_hidden_states") = false, py::arg("output_attentions") = false,
          py::arg("return_dict") = false, py::arg("skip_padding") = true,
          "Runs the encoder on input_ids (B, T) or (T,) int64, attention_mask (B, T) 1 = token / 0 = padding "
          "(None: all tokens) and token_type_ids (None: zeros). Returns last_hidden_state (B, T, hidden) float32; with return_dict or output_* a dict with pooler_output, logits, "
          "hidden_states and attentions too. skip_padding (default): a right-padded batch runs on its real tokens "
          "only and hidden states are 0 at padded positions; False computes padded positions as transformers does.")
      .def_property_readonly("config", [](const encore::AutoModel& self) {
        const encore::ModelInfo& i = self.info();
        py::dict d;
        d["model_type"] = i.model_type;
        d["dtype"] = i.dtype;
        d["architecture"] = i.architecture;
        d["hidden_size"] = i.hidden_size;
        d["num_hidden_layers"] = i.num_layers;
        d["num_attention_heads"] = i.num_heads;
        d["intermediate_size"] = i.intermediate_size;
        d["hidden_act"] = i.hidden_act;
        d["vocab_size"] = i.vocab_size;
        d["max_position_embeddings"] = i.max_position_embeddings;
        d["head"] = i.head;
        d["num_labels"] = i.num_labels;
        d["id2label"] = i.id2label;
        return d;
      }, "config.json's fields as loaded (model_type, hidden_size, num_hidden_layers, ..., head, id2label) and dtype")
      .def_property_readonly("max_sequence_length", &encore::AutoModel::max_sequence_length,
                             "token positions the model takes (max_position_embeddings less any offset)")
      .def(
          "train",
          [](py::object self, bool mode) {
            self.cast<encore::AutoModel&>().train(mode);
            return self;
          },
          py::arg("mode") = true,
          "Training mode (mode=True): forward saves what backward needs and dropout applies. Returns self.")
      .def("eval",
           [](py::object self) {
             self.cast<encore::AutoModel&>().eval();
             return self;
           }, "Inference mode (train(False)). Returns self.")
      .def(
          "backward",
          [](encore::AutoModel& self, const py::object& d_last, const py::object& d_pooler,
             const py::object& d_logits) {
            Tensor a = d_last.is_none() ? Tensor() : float_tensor(d_last, "d_last_hidden_state");
            Tensor b = d_pooler.is_none() ? Tensor() : float_tensor(d_pooler, "d_pooler_output");
            Tensor c = d_logits.is_none() ? Tensor() : float_tensor(d_logits, "d_logits");
            py::gil_scoped_release nogil;
            self.backward(a, b, c);
          },
          py::arg("d_last_hidden_state") = py::none(), py::arg("d_pooler_output") = py::none(),
          py::arg("d_logits") = py::none(), "accumulate parameter gradients for the last training-mode forward")
      .def(
          "export_hf",
          [](const encore::AutoModel& self) {
            encore::HfExport e = self.export_hf();
            py::dict tensors;
            for (auto& [name, t] : e.tensors) tensors[py::str(name)] = to_numpy(t);
            return py::make_tuple(e.architecture, tensors);
          },
          "(architecture, {name: array}): the parameters under transformers' names (what encore train saves)")
      .def("set_dropout", &encore::AutoModel::set_dropout, py::arg("p"),
           "one dropout probability for every site of the training forward")
      .def("add_sequence_classifier", &encore::AutoModel::add_sequence_classifier, py::arg("num_labels"),
           py::arg("seed") = 0,
           "a new sequence-classification head laid out as the family's *ForSequenceClassification, normal(0, 0.02)")
      .def("add_token_classifier", &encore::AutoModel::add_token_classifier, py::arg("num_labels"), py::arg("seed") = 0,
           "a new token-classification head laid out as the family's *ForTokenClassification, normal(0, 0.02)")
      .def_property("gradient_checkpointing", &encore::AutoModel::gradient_checkpointing,
                    &encore::AutoModel::set_gradient_checkpointing,
                    "training: keep only layer inputs and recompute each layer's forward during backward")
      .def("parameters_module", &encore::AutoModel::module, py::return_value_policy::reference_internal,
           "the nn.Module view of the model: state_dict(), grads(), zero_grad(), and what optimisers take");
}

}  // namespace encore_py
