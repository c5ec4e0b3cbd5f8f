#include <cstdio>
#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
  std::cerr << "kiln: no command\n";
  return 2;
}
