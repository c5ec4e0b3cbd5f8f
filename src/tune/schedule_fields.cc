#include "tune/schedule_fields.h"

#include <functional>

namespace kiln::tune {

namespace {

struct Field {
  std::string name;
  std::function<int64_t&(loop::Schedule&)> ref64;  // int64_t fields
  std::function<int&(loop::Schedule&)> ref32;      // int fields
};

const std::vector<Field>& fields() {
  using S = loop::Schedule;
  static const std::vector<Field> f = {
      {"unroll", nullptr, [](S& s) -> int& { return s.unroll; }},
      {"parallel_min_work", [](S& s) -> int64_t& { return s.parallel_min_work; }, nullptr},
      {"contraction.mr", nullptr, [](S& s) -> int& { return s.contraction.mr; }},
      {"contraction.nr", nullptr, [](S& s) -> int& { return s.contraction.nr; }},
      {"contraction.kc", [](S& s) -> int64_t& { return s.contraction.kc; }, nullptr},
      {"contraction.a_reuse_bytes", [](S& s) -> int64_t& { return s.contraction.a_reuse_bytes; }, nullptr},
      {"contraction.channel_rows_positions", [](S& s) -> int64_t& { return s.contraction.channel_rows_positions; },
       nullptr},
      {"contraction.channel_rows_positions_few_k",
       [](S& s) -> int64_t& { return s.contraction.channel_rows_positions_few_k; }, nullptr},
      {"contraction.window_channel_rows_plane_bytes",
       [](S& s) -> int64_t& { return s.contraction.window_channel_rows_plane_bytes; }, nullptr},
      {"contraction.window_channel_rows_min_cout",
       [](S& s) -> int64_t& { return s.contraction.window_channel_rows_min_cout; }, nullptr},
      {"contraction.fit_position_rows", nullptr, [](S& s) -> int& { return s.contraction.fit_position_rows; }},
      {"contraction.split_line_waste_percent", nullptr,
       [](S& s) -> int& { return s.contraction.split_line_waste_percent; }},
      {"contraction.implicit_kc", [](S& s) -> int64_t& { return s.contraction.implicit_kc; }, nullptr},
      {"contraction.implicit_whole_k_bytes", [](S& s) -> int64_t& { return s.contraction.implicit_whole_k_bytes; },
       nullptr},
      {"contraction.gemm_whole_k_bytes", [](S& s) -> int64_t& { return s.contraction.gemm_whole_k_bytes; }, nullptr},
      {"contraction.implicit_channels_inner", nullptr,
       [](S& s) -> int& { return s.contraction.implicit_channels_inner; }},
      {"contraction.implicit_inner_nr", nullptr, [](S& s) -> int& { return s.contraction.implicit_inner_nr; }},
      {"contraction.fit_panel_width", nullptr, [](S& s) -> int& { return s.contraction.fit_panel_width; }},
      {"contraction.channel_rows_few_k", [](S& s) -> int64_t& { return s.contraction.channel_rows_few_k; }, nullptr},
      {"contraction.store_run", [](S& s) -> int64_t& { return s.contraction.store_run; }, nullptr},
      {"contraction.store_tile_floats", [](S& s) -> int64_t& { return s.contraction.store_tile_floats; }, nullptr},
      {"contraction.store_max_k", [](S& s) -> int64_t& { return s.contraction.store_max_k; }, nullptr},
      {"contraction.rows_min_column_percent", [](S& s) -> int64_t& { return s.contraction.rows_min_column_percent; },
       nullptr},
      {"contraction.conv_rows_max_work", [](S& s) -> int64_t& { return s.contraction.conv_rows_max_work; }, nullptr},
      {"contraction.copy_b_min_k", [](S& s) -> int64_t& { return s.contraction.copy_b_min_k; }, nullptr},
      {"contraction.columns_outer", nullptr, [](S& s) -> int& { return s.contraction.columns_outer; }},
      {"contraction.store_per_call", nullptr, [](S& s) -> int& { return s.contraction.store_per_call; }},
      {"contraction.channels_last_direct", nullptr, [](S& s) -> int& { return s.contraction.channels_last_direct; }},
      {"rows_block_bytes", [](S& s) -> int64_t& { return s.rows_block_bytes; }, nullptr},
      {"stencil_bytes", [](S& s) -> int64_t& { return s.stencil_bytes; }, nullptr},
      {"stencil_max_group_width", [](S& s) -> int64_t& { return s.stencil_max_group_width; }, nullptr},
      {"stencil_few_outputs_min_work", [](S& s) -> int64_t& { return s.stencil_few_outputs_min_work; }, nullptr},
      {"stencil_strided_depthwise", nullptr, [](S& s) -> int& { return s.stencil_strided_depthwise; }},
      {"stencil_direct_min_width", [](S& s) -> int64_t& { return s.stencil_direct_min_width; }, nullptr},
      {"stencil_kernel_min_width", [](S& s) -> int64_t& { return s.stencil_kernel_min_width; }, nullptr},
      {"stencil_whole_vectors", nullptr, [](S& s) -> int& { return s.stencil_whole_vectors; }},
      {"stencil_channel_blocks_below", [](S& s) -> int64_t& { return s.stencil_channel_blocks_below; }, nullptr},
      {"stage_plane_bytes", [](S& s) -> int64_t& { return s.stage_plane_bytes; }, nullptr},
      {"channels_last_values", nullptr, [](S& s) -> int& { return s.channels_last_values; }},
      {"pointwise_depthwise_bytes", [](S& s) -> int64_t& { return s.pointwise_depthwise_bytes; }, nullptr},
      {"chain.max_pack_bytes", [](S& s) -> int64_t& { return s.chain.max_pack_bytes; }, nullptr},
      {"chain.max_row_blocks", [](S& s) -> int64_t& { return s.chain.max_row_blocks; }, nullptr},
      {"chain.min_tiles", [](S& s) -> int64_t& { return s.chain.min_tiles; }, nullptr},
      {"chain.max_local_bytes", [](S& s) -> int64_t& { return s.chain.max_local_bytes; }, nullptr},
      {"chain.max_stream_bytes", [](S& s) -> int64_t& { return s.chain.max_stream_bytes; }, nullptr},
      {"chain.row_jam", [](S& s) -> int64_t& { return s.chain.row_jam; }, nullptr},
      {"chain.row_jam_from", [](S& s) -> int64_t& { return s.chain.row_jam_from; }, nullptr},
      {"chain.row_jam_below", [](S& s) -> int64_t& { return s.chain.row_jam_below; }, nullptr},
  };
  return f;
}

const Field* find(const std::string& name) {
  for (const Field& f : fields())
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace

const std::vector<std::string>& schedule_field_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Field& f : fields()) n.push_back(f.name);
    return n;
  }();
  return names;
}

std::optional<int64_t> get_field(const loop::Schedule& s, const std::string& name) {
  const Field* f = find(name);
  if (!f) return std::nullopt;
  loop::Schedule copy = s;  // the accessors take a mutable schedule
  return f->ref64 ? f->ref64(copy) : int64_t(f->ref32(copy));
}

bool set_field(loop::Schedule& s, const std::string& name, int64_t value) {
  const Field* f = find(name);
  if (!f) return false;
  if (f->ref64) f->ref64(s) = value;
  else f->ref32(s) = int(value);
  return true;
}

std::map<std::string, int64_t> changed_fields(const loop::Schedule& s, const loop::Schedule& base) {
  std::map<std::string, int64_t> r;
  for (const std::string& n : schedule_field_names())
    if (*get_field(s, n) != *get_field(base, n)) r[n] = *get_field(s, n);
  return r;
}

std::string describe_fields(const std::map<std::string, int64_t>& fields) {
  if (fields.empty()) return "default";
  std::string r;
  for (const auto& [k, v] : fields) r += (r.empty() ? "" : " ") + k + "=" + std::to_string(v);
  return r;
}

}  // namespace kiln::tune
