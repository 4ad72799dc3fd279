# Writes OUT, a C++ file holding every file of DATA_DIR as a byte array
# (test_data::files()), so that the codec test carries pyarrow's samples
# with it (the GPU machine runs test binaries built elsewhere).
file(GLOB names RELATIVE ${DATA_DIR} ${DATA_DIR}/*)
list(SORT names)
set(body "")
set(table "")
set(i 0)
foreach(name IN LISTS names)
  file(READ ${DATA_DIR}/${name} hex HEX)
  file(SIZE ${DATA_DIR}/${name} size)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  string(APPEND body "const unsigned char f${i}[] = {${hex} 0};\n")
  string(APPEND table "    {\"${name}\", {reinterpret_cast<const std::byte*>(f${i}), ${size}}},\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE ${OUT}.tmp "// Generated from tests/ipc/data by tests/ipc/embed_data.cmake.\n"
  "#include \"test_data.hpp\"\n\nnamespace test_data {\nnamespace {\n${body}}  // namespace\n\n"
  "const std::map<std::string, std::span<const std::byte>>& files() {\n"
  "  static const std::map<std::string, std::span<const std::byte>> m{\n${table}  };\n  return m;\n}\n\n"
  "}  // namespace test_data\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
